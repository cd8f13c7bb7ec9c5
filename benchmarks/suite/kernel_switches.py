"""Which kernel switches change the numbers on this machine: the same short computation in a fresh
process under each switch alone and under all of them, compared bit for bit with the machine's
own kernels.

`benchmarks/suite/test_margins.py` emulates an AVX2-only CPU on an AVX-512 one with three switches
(`ATEN_CPU_CAPABILITY=avx2`, `ONEDNN_MAX_CPU_ISA=AVX2`, `MKL_ENABLE_INSTRUCTIONS=AVX2`). This
script says which of them matter here. Two computations, one torch thread each:

- `matmul`: a float32 MLP forward and backward on fixed inputs (the BLAS path: torch's CPU wheel
  calls MKL or oneDNN for `addmm`), its loss and gradient norm;
- `critic fit`: the test suite's critic regression, shortened (CarryWord, the default warm start,
  then 40 regression steps: `benchmarks/studies/critic_input.py::fit_error`), its largest and mean error.

    .venv/bin/python benchmarks/suite/kernel_switches.py [--fit-steps 40]

Prints a table (each value with 9 significant digits, `=` where it is bit-identical to `native`)
and writes benchmarks/suite/results/kernel_switches/kernel_switches.json.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro
from test_margins import KERNELS  # the kernel sets the margins are measured under

ROOT = Path(__file__).resolve().parents[2]
AVX2 = KERNELS["avx2"]
SWITCHES: dict[str, dict[str, str]] = {
    "native": KERNELS["native"],
    **{f"{name}={value}": {name: value} for name, value in AVX2.items()},  # each switch alone
    "all three (the avx2 set)": AVX2,
    "ATEN_CPU_CAPABILITY=default": KERNELS["default"],
}


@dataclass(frozen=True)
class Args:
    fit_steps: int = 40
    """Regression steps of the critic fit (the suite's test runs 300)."""
    output: Path = Path("benchmarks/suite/results/kernel_switches/kernel_switches.json")


def child(fit_steps: int) -> dict:
    """The computations, in this process (its switches were set before torch loaded)."""
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "benchmarks" / "studies"))  # critic_input, a study script
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 256, generator=generator)
    w1 = torch.randn(256, 1024, generator=generator).mul_(0.05).requires_grad_()
    w2 = torch.randn(1024, 1, generator=generator).mul_(0.05).requires_grad_()
    loss = (torch.nn.functional.gelu(x @ w1) @ w2).square().mean()
    loss.backward()
    gradient = torch.cat([w1.grad.flatten(), w2.grad.flatten()]).norm()
    from critic_input import fit_error

    largest, mean = fit_error("sacglam.envs.sanity:CarryWord", 2, "last", 0, fit_steps)
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "matmul_loss": float(loss),
        "matmul_gradient_norm": float(gradient),
        "fit_largest": float(largest),
        "fit_mean": float(mean),
    }


def measure(switches: dict[str, str], fit_steps: int) -> dict:
    env = {**{k: v for k, v in os.environ.items() if k not in AVX2}, **switches, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(fit_steps)], env=env, cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{switches}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(args: Args) -> None:
    results = {name: measure(switches, args.fit_steps) for name, switches in SWITCHES.items()}
    native = results["native"]
    values = ("matmul_loss", "matmul_gradient_norm", "fit_largest", "fit_mean")
    print("| switches | capability | " + " | ".join(values) + " |")
    print("| --- " * (len(values) + 2) + "|")
    for name, result in results.items():
        cells = [f"{result[v]:.9g}" + (" =" if name != "native" and result[v] == native[v] else "") for v in values]
        print(f"| {name} | {result['capability']} | " + " | ".join(cells) + " |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    flags = Path("/proc/cpuinfo").read_text()
    body = {
        "cpu": cpu,
        "avx512": "avx512f" in flags,
        "fit_steps": args.fit_steps,
        "switches": SWITCHES,
        "results": results,
    }
    args.output.write_text(json.dumps(body, indent=2))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(int(sys.argv[2]))))
    else:
        main(tyro.cli(Args))
