"""Build the wheel and sdist, install the wheel in a fresh virtual environment,
and run ``orchestra demo plan`` from it (not from the checkout).

    python tools/check_wheel.py [--keep DIR]

Steps, each said as it goes; exits 1 at the first that fails:

1. ``python -m build`` (an sdist, then the wheel built from that sdist, so a
   file the sdist forgets fails here) into a temporary ``dist/``;
2. the wheel holds ``orchestra/py.typed`` and the console's static files, and
   its metadata names the distribution ``orchestra-trees``;
3. a new virtual environment, the wheel installed into it with its
   dependencies (from the configured index);
4. in an empty directory outside the checkout: ``orchestra --version``, then
   ``orchestra demo plan --json`` on the embedded scripted provider, which must
   complete; and ``import orchestra`` must come from the new environment.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION = "orchestra-trees"


def step(said: str, *args: str | Path, cwd: Path | None = None) -> str:
    """Run ``args``; its stdout. Exits 1 with its output if it fails."""
    print(f"[wheel] {said}", flush=True)
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"[wheel] FAILED: {said}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def check_contents(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {"orchestra/py.typed", "orchestra/console/static/console.js"}
    missing = wanted - names
    if missing:
        sys.exit(f"[wheel] FAILED: the wheel lacks {sorted(missing)}")
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    if f"Name: {DISTRIBUTION}\n" not in text:
        sys.exit(f"[wheel] FAILED: the wheel's metadata does not name {DISTRIBUTION}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", type=Path, default=None, help="work here (kept)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="orchestra-wheel."))
    work.mkdir(parents=True, exist_ok=True)
    dist, env, elsewhere = work / "dist", work / "venv", work / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    step("build the sdist, then the wheel from it", sys.executable, "-m", "build",
         "--outdir", dist, ROOT)  # fmt: skip
    [wheel] = dist.glob("*.whl")
    check_contents(wheel)
    step("a fresh virtual environment", sys.executable, "-m", "venv", env)
    python, orchestra = env / "bin" / "python", env / "bin" / "orchestra"
    step(f"install {wheel.name} with its dependencies", python, "-m", "pip", "install",
         "-q", wheel)  # fmt: skip
    where = step("import orchestra from it", python, "-c",
                 "import orchestra; print(orchestra.__file__)", cwd=elsewhere)  # fmt: skip
    if not where.strip().startswith(str(env)):
        sys.exit(f"[wheel] FAILED: orchestra was imported from {where.strip()}, not {env}")
    print(f"[wheel] {step('orchestra --version', orchestra, '--version', cwd=elsewhere).strip()}")
    out = step("orchestra demo plan, from the installed wheel", orchestra, "demo", "plan",
               "--json", "--store", elsewhere / "runs.db", cwd=elsewhere)  # fmt: skip
    report = json.loads(out)
    if report["status"] != "completed":
        sys.exit(f"[wheel] FAILED: the demo ended {report['status']}: {report['reason']}")
    print(f"[wheel] ok: {wheel.name} installs and its demo completes ({report['run_id']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
