"""The goal space: counts, split and grammar exactly as in the spec."""

from collections import Counter

import pytest

from sacglam.envs import goals
from sacglam.envs.goals import GOAL_TYPES, goal_type, parse_goal
from tests.reference_playground import reference_goal_sets


def test_goal_counts_match_spec():
    assert len(goals.TRAIN_GOALS) == 8470
    assert len(goals.TEST_GOALS) == 3145
    assert len(goals.SIMPLE_TRAIN_GOALS) == 182
    assert len(goals.SIMPLE_TEST_GOALS) == 64
    train_types = Counter(goal_type(g) for g in goals.SIMPLE_TRAIN_GOALS)
    assert train_types == {"grasp": 136, "grow": 46}
    assert sum(" then " in g for g in goals.TRAIN_GOALS) == 8288
    assert sum(" then " in g for g in goals.TEST_GOALS) == 3081


def test_goal_sets_are_sorted_tuples_of_distinct_str():
    for name, goal_set in goals.GOAL_SETS.items():
        assert isinstance(goal_set, tuple), name
        assert all(isinstance(g, str) for g in goal_set), name
        assert list(goal_set) == sorted(goal_set), name
        assert len(set(goal_set)) == len(goal_set), name


def test_no_goal_is_both_train_and_test():
    assert not set(goals.TRAIN_GOALS) & set(goals.TEST_GOALS)


def test_simple_sets_are_the_single_goals_of_the_full_sets():
    assert set(goals.SIMPLE_TRAIN_GOALS) == {g for g in goals.TRAIN_GOALS if " then " not in g}
    assert set(goals.SIMPLE_TEST_GOALS) == {g for g in goals.TEST_GOALS if " then " not in g}


def test_goal_sets_equal_an_independent_string_construction():
    reference = reference_goal_sets()
    for name, goal_set in goals.GOAL_SETS.items():
        assert set(goal_set) == reference[name], name


@pytest.mark.parametrize(
    "goal, split",
    [
        ("Grasp any animal", "test"),
        ("Grasp blue fly", "test"),
        ("Grasp red tree", "test"),
        ("Grow any plant", "test"),
        ("Grow green living_thing", "test"),
        ("Grow green dog", "test"),
        ("Grasp blue door", "test"),
        ("Grasp any flower", "test"),
        ("Grasp red plant", "train"),
        ("Grow red fly", "train"),
        ("Grow any red thing", "train"),
        ("Grasp any living_thing", "train"),
        ("Grow red cat then grasp any water", "train"),
        ("Grow any red thing then grow any green thing", "train"),
        ("Grow any plant then grasp any flower", "test"),
    ],
)
def test_split_examples(goal, split):
    assert goal in (goals.TRAIN_GOALS if split == "train" else goals.TEST_GOALS)


def test_sequential_goals_pair_a_grow_goal_with_a_goal_of_its_split_on_another_object():
    for goal_set, singles in (
        (goals.TRAIN_GOALS, goals.SIMPLE_TRAIN_GOALS),
        (goals.TEST_GOALS, goals.SIMPLE_TEST_GOALS),
    ):
        singles = set(singles)
        for goal in goal_set:
            if " then " not in goal:
                continue
            first, second = goal.split(" then ")
            assert first.startswith("Grow ") and first in singles
            assert second[0].islower() and second[0].upper() + second[1:] in singles
            assert first.split()[-2:] != second.split()[-2:]


def test_train_goals_are_98_percent_sequential():
    share = sum(" then " in g for g in goals.TRAIN_GOALS) / len(goals.TRAIN_GOALS)
    assert 0.975 < share < 0.985


def test_parse_goal_round_trips_every_goal():
    for goal in goals.TRAIN_GOALS + goals.TEST_GOALS:
        parts = parse_goal(goal)
        text = parts[0].text() if len(parts) == 1 else f"{parts[0].text()} then {parts[1].text(capitalized=False)}"
        assert text == goal
        assert goal_type(goal) in GOAL_TYPES


@pytest.mark.parametrize("bad", ["Grasp purple cat", "grasp red cat", "Grasp red cat then grow red dog", "", "Fly"])
def test_parse_goal_rejects_non_goals_with_a_clear_message(bad):
    with pytest.raises(ValueError, match="is not a Playground-Text goal"):
        parse_goal(bad)


def test_goal_type_shares_are_the_fractions_of_each_goal_set():
    shares = goals.goal_type_shares("train")
    assert shares["grasp"] == pytest.approx(136 / 8470) and shares["grow"] == pytest.approx(46 / 8470)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert goals.goal_type_shares("simple-test")["grow then grasp"] == 0.0
