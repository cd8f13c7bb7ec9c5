"""Files carried in parts (`sacglam.models.parts`): split under a limit, checked and joined."""

import json

import pytest

from sacglam.models.parts import PartsError, join_parts, manifest_name, sha256_of, split_file


@pytest.fixture
def original(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(bytes(range(256)) * 1000 + b"tail")  # 256,004 bytes
    return path


def test_parts_stay_under_the_limit_travel_apart_and_join_to_the_same_bytes(tmp_path, original):
    first, second = tmp_path / "a", tmp_path / "b"
    manifests = split_file(original, [first, second], max_part_bytes=100_000)
    manifest = json.loads(manifests[0].read_text())
    assert [p["name"] for p in manifest["parts"]] == [f"model.gguf.part{k}of3" for k in (1, 2, 3)]
    assert all(p["size"] <= 100_000 for p in manifest["parts"]) and sum(p["size"] for p in manifest["parts"]) == 256_004
    assert (first / "model.gguf.part1of3").exists() and (second / "model.gguf.part2of3").exists()
    assert manifests == [first / manifest_name("model.gguf"), second / manifest_name("model.gguf")]
    out = join_parts(first / manifest_name("model.gguf"), tmp_path / "joined" / "model.gguf", search=[second])
    assert out.read_bytes() == original.read_bytes() and sha256_of(out) == manifest["sha256"]


def test_a_missing_or_damaged_part_is_named_and_nothing_is_written(tmp_path, original):
    first, second = tmp_path / "a", tmp_path / "b"
    split_file(original, [first, second], max_part_bytes=150_000)
    out = tmp_path / "joined" / "model.gguf"
    with pytest.raises(PartsError, match="part model.gguf.part2of2 of model.gguf is missing"):
        join_parts(first / manifest_name("model.gguf"), out)
    damaged = bytearray((second / "model.gguf.part2of2").read_bytes())
    damaged[10] ^= 1
    (second / "model.gguf.part2of2").write_bytes(bytes(damaged))
    with pytest.raises(PartsError, match="damaged"):
        join_parts(first / manifest_name("model.gguf"), out, search=[second])
    assert not out.exists()


def test_parts_of_different_files_are_refused_by_the_whole_files_checksum(tmp_path, original):
    split_file(original, [tmp_path / "a"], max_part_bytes=150_000)
    other = tmp_path / "other" / "model.gguf"
    other.parent.mkdir()
    other.write_bytes(original.read_bytes()[:-4] + b"TAIL")
    split_file(other, [tmp_path / "o"], max_part_bytes=150_000)
    manifest = json.loads((tmp_path / "a" / manifest_name("model.gguf")).read_text())
    manifest["parts"][1] = json.loads((tmp_path / "o" / manifest_name("model.gguf")).read_text())["parts"][1]
    (tmp_path / "a" / manifest_name("model.gguf")).write_text(json.dumps(manifest))
    (tmp_path / "a" / "model.gguf.part2of2").write_bytes((tmp_path / "o" / "model.gguf.part2of2").read_bytes())
    with pytest.raises(PartsError, match="sha256"):
        join_parts(tmp_path / "a" / manifest_name("model.gguf"), tmp_path / "joined.gguf")
    assert not (tmp_path / "joined.gguf").exists() and not (tmp_path / ".joined.gguf.partial").exists()
