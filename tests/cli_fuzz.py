"""Bad inputs across commands, run as a user would (one process each): each must end with an
exit status other than 0, an `error:` line, no traceback, within 30 s. Cases that reach the GPU
check are listed apart (a bad input should be refused before it).

    python tests/cli_fuzz.py .     # from the repository root; a few minutes on two cores
"""

import copy
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(sys.argv[1])
OUT = Path(tempfile.mkdtemp(prefix="orion-fuzz-"))
BAD_VALUES = [-1, 0, 10**30, "x", None, True, 1e308, [], {}]
cases = []  # (id, argv, cwd)


def write(name, data, text=None):
    p = OUT / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text if text is not None else json.dumps(data))
    return str(p)


def mutate(doc, path, value):
    d = copy.deepcopy(doc)
    t = d
    for k in path[:-1]:
        t = t[k]
    t[path[-1]] = value
    return d


def numeric_paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from numeric_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from numeric_paths(v, (*prefix, i))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield prefix


files = {
    "colocate": (ROOT / "examples/headline.json", lambda p: ["colocate", p]),
    "plan": (ROOT / "examples/fleet-h100x4.json", lambda p: ["plan", p]),
    "simulate": (
        ROOT / "tests/data/placement/simulate/fleet.json",
        lambda p: ["simulate", p, "--matrix-dir", str(ROOT / "tests/data/placement/pairs")],
    ),
    "pairs": (ROOT / "examples/pairs.json", lambda p: ["pairs", p, "--out", str(OUT / "pm")]),
}
n = 0
for cmd, (src, argv) in files.items():
    doc = json.loads(src.read_text())
    for path in numeric_paths(doc):
        for value in BAD_VALUES:
            if value == 0 and path[-1] in ("seed", "warmup_steps", "gpu"):
                continue
            n += 1
            p = write(f"{cmd}/{n}.json", mutate(doc, path, value))
            cases.append((f"{cmd} {'.'.join(map(str, path))}={value!r}"[:90], argv(p)))
    # whole-file damage
    for name, text in [
        ("empty", ""),
        ("binary", "\x00\xff"),
        ("nested", "[" * 100000 + "]" * 100000),
        ("not-json", "{"),
        ("list", "[]"),
        ("huge-int", src.read_text().replace("1", "9" * 5000, 1)),
    ]:
        cases.append((f"{cmd} file {name}", argv(write(f"{cmd}/{name}.json", None, text))))
    cases.append((f"{cmd} missing file", argv(str(OUT / "nope.json"))))
    cases.append((f"{cmd} a folder", argv(str(OUT))))
# output paths
existing = write("existing.txt", None, "x")
for cmd, (src, argv) in files.items():
    for o in ["/proc/orion-x", existing, existing + "/sub"]:
        if cmd == "plan" and o == existing:
            continue  # plan -o replaces an existing file, as -o does elsewhere
        flag = "--out" if cmd == "pairs" else "-o"
        a = argv(str(src))
        if cmd == "pairs":
            a = a[:-2]
        cases.append((f"{cmd} {flag} {o}", [*a, flag, o]))
runs = (
    ROOT
    / "benchmarks/results/nvidia-h100-80gb-hbm3/headline-graph-traced/runs"
    / "resnet50-graph-low__resnet50-train"
)
one = str(sorted(runs.iterdir())[0])
for o in ["/proc/orion-x", existing]:
    cases.append((f"report -o {o}", ["report", one, "-o", o]))
    cases.append((f"report --json -o {o}", ["report", "--json", one, "-o", o]))
cases.append(("report same dir twice", ["report", "--no-plots", one, one]))
cases.append(("report not a run", ["report", str(OUT)]))
cases.append(("report missing", ["report", str(OUT / "none")]))
for name, text in [
    ("nested", "[" * 100000 + "]" * 100000),
    ("cut", '{"format": "orion-run"'),
    ("binary", "\x00\x01"),
]:
    d = OUT / f"run-{name}"
    d.mkdir()
    (d / "run.json").write_text(text)
    cases.append((f"report run.json {name}", ["report", str(d)]))
# flags
cases += [
    ("pairs --time-budget -5", ["pairs", str(ROOT / "examples/pairs.json"), "--time-budget", "-5"]),
    ("pairs --time-budget 0", ["pairs", str(ROOT / "examples/pairs.json"), "--time-budget", "0"]),
    (
        "plan --objective nope",
        ["plan", str(ROOT / "examples/fleet-h100x4.json"), "--objective", "nope"],
    ),
    (
        "plan --matrix-dir missing",
        ["plan", str(ROOT / "examples/fleet-h100x4.json"), "--matrix-dir", str(OUT / "none")],
    ),
    (
        "colocate --policy nope",
        ["colocate", str(ROOT / "examples/headline.json"), "--policy", "nope"],
    ),
    (
        "colocate --duration -1",
        ["colocate", str(ROOT / "examples/headline.json"), "--duration", "-1"],
    ),
    ("profile unknown workload", ["profile", "nosuch"]),
    ("profile bad mode", ["profile", "resnet50", "--mode", "nope"]),
    ("profile batch 0", ["profile", "resnet50", "-b", "0"]),
    ("profile cuda-graph synthetic", ["profile", "synthetic-compute", "--cuda-graph"]),
    ("profile --from-ncu missing", ["profile", "resnet50", "--from-ncu", str(OUT / "none.csv")]),
    ("quota not a run", ["quota", str(OUT), "hp", "--memory-limit", "1GiB"]),
]


def run(case):
    name, argv = case
    try:
        r = subprocess.run(
            [sys.executable, "-m", "orion_cli.app", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return name, "TIMEOUT", ""
    out = r.stdout + r.stderr
    problems = []
    if "Traceback" in out:
        problems.append("traceback")
    if r.returncode == 0:
        problems.append("exit 0")
    if "error" not in out.lower():
        problems.append("no error line")
    if "no NVIDIA GPU" in out or "GPU 0 is visible" in out or "this host has 0 GPU" in out:
        problems.append("GPU-check")
    return (
        name,
        ",".join(problems) or "ok",
        out.strip().splitlines()[-1][:160] if out.strip() else "",
    )


with ThreadPoolExecutor(2) as pool:
    results = list(pool.map(run, cases))
bad = [r for r in results if r[1] not in ("ok", "GPU-check")]
for r in results:
    if r[1] == "GPU-check":
        print("GPU", r[0])
for r in bad:
    print("FAIL", r)
print(f"tried {len(results)}, passed {len(results) - len(bad)}, failed {len(bad)}")
