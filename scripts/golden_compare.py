#!/usr/bin/env python3
"""Compare two folders of scripts/golden_outputs.sh across the change that gave mutant groups
their own output (issue 33, item 8): everything must be byte-identical except what a mutant
group writes, and there the new files must say exactly what the old per-seed rows said.

    python3 scripts/golden_compare.py OLD NEW

A file that differs is accepted only by the rule for its name:

- seeds.csv, summary.csv: the new file is the old one without its mutant rows;
- frontiers.bin: the new file is the old one without the mutant groups' records (plan.csv,
  which must be identical, says which groups are mutants);
- seeds.parquet: the new file is, byte for byte, the old build's file of the same sweep
  without `--mutants` (the folder NAME-clean next to it);
- mutants.csv: the old columns of every check row are unchanged; the new columns
  (first_detected_seed, max_usage_pct) and the `(any)` rows are what the old per-seed rows of
  the same folder give, where the old folder has seeds.csv;
- fingerprint.txt: only the checksum lines of files that differ.

Anything else that differs, or a file in one folder only, is a failure (exit 1). No
dependencies beyond the standard library.
"""

import csv
import os
import struct
import sys
from collections import defaultdict

ANY = "(any)"


def rows(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], r[1:]


def plan_groups(path):
    """Group keys (scenario, param, profile, mutant) in plan order, and the asserted
    comparison of each."""
    head, body = rows(path)
    ix = {h: i for i, h in enumerate(head)}
    groups, asserted = [], {}
    for r in body:
        k = (r[ix["scenario"]], r[ix["param"]], r[ix["profile"]], r[ix["mutant"]])
        if not groups or groups[-1] != k:
            groups.append(k)
        asserted[k] = r[ix["asserted"]]
    return groups, asserted


def without_mutant_rows(path):
    """The file's lines but those of mutant rows (no field of these tables holds a line
    break, so a line is a row)."""
    lines = open(path, "rb").read().decode().splitlines(keepends=True)
    m = next(csv.reader([lines[0]])).index("mutant")
    keep = [lines[0]] + [l for l in lines[1:] if next(csv.reader([l]))[m] == ""]
    return "".join(keep).encode()


def frontier_records(data):
    assert data[:8] == b"SSFRNT01", "not a frontiers file"
    pos, out = 8, []
    while pos < len(data):
        start = pos
        group, _seed, checks = struct.unpack_from("<IQI", data, pos)
        pos += 16
        for _ in range(checks):
            (m,) = struct.unpack_from("<I", data, pos)
            pos += 4 + 16 * m
        out.append((group, data[start:pos]))
    return out


def check_frontiers(old_dir, new_dir, old, new):
    groups, _ = plan_groups(os.path.join(old_dir, "plan.csv"))
    keep = b"".join(rec for g, rec in frontier_records(old) if groups[g][3] == "")
    return old[:8] + keep == new


def check_mutants(old_dir, old_path, new_path):
    oh, ob = rows(old_path)
    nh, nb = rows(new_path)
    ni = {h: i for i, h in enumerate(nh)}
    if [h for h in nh if h in oh] != oh:
        return "the old columns are not kept in order"
    key = lambda r, ix: tuple(r[ix[c]] for c in ("mutant", "scenario", "param", "profile", "check", "comparison", "policy"))
    oi = {h: i for i, h in enumerate(oh)}
    old_rows = {key(r, oi): r for r in ob}
    checks = [r for r in nb if r[ni["check"]] != ANY]
    if len(checks) != len(ob):
        return f"{len(checks)} check rows, {len(ob)} before"
    for r in checks:
        o = old_rows.get(key(r, ni))
        if o is None or any(o[oi[c]] != r[ni[c]] for c in oh):
            return f"row {key(r, ni)} changed"
    seeds_csv = os.path.join(old_dir, "seeds.csv")
    if not os.path.exists(seeds_csv):
        return None  # no per-seed rows to check the new columns against
    # What the old per-seed rows say: per entry and, per policy, over the asserted checks.
    _, asserted = plan_groups(os.path.join(old_dir, "plan.csv"))
    sh, sb = rows(seeds_csv)
    si = {h: i for i, h in enumerate(sh)}
    per_entry = defaultdict(list)  # key -> [(seed, usage, text)]
    per_seed = defaultdict(lambda: defaultdict(list))  # (group, policy) -> seed -> [(usage, text)]
    for r in sb:
        if r[si["mutant"]] == "":
            continue
        g = (r[si["scenario"]], r[si["param"]], r[si["profile"]], r[si["mutant"]])
        u, t, seed = float(r[si["usage_pct"]]), r[si["usage_pct"]], int(r[si["seed"]])
        k = (g[3], g[0], g[1], g[2], r[si["check"]], r[si["comparison"]], r[si["policy"]])
        per_entry[k].append((seed, u, t))
        if r[si["comparison"]] == asserted[g]:
            per_seed[(g, r[si["policy"]])][seed].append((u, t))

    def expect(vals):
        # vals: [(seed, usage, text)] in seed order; the first seed wins ties, as the
        # aggregate's strict comparisons do.
        det = [s for s, u, _ in vals if u > 100.0]
        lo = min(vals, key=lambda v: v[1])
        hi = max(vals, key=lambda v: v[1])
        return [str(len(det)), str(len(vals)), str(det[0]) if det else "", lo[2], hi[2]]

    new_cols = ["detected_seeds", "seeds", "first_detected_seed", "min_usage_pct", "max_usage_pct"]
    for r in nb:
        k = key(r, ni)
        got = [r[ni[c]] for c in new_cols]
        if r[ni["check"]] != ANY:
            want = expect(per_entry[k])
        else:
            g = (k[1], k[2], k[3], k[0])
            if k[5] != asserted[g]:
                return f"{k}: not the asserted comparison"
            by_seed = per_seed[(g, k[6])]
            vals = [(s,) + max(v, key=lambda x: x[0]) for s, v in sorted(by_seed.items())]
            want = expect(vals)
        # Equal floats may be spelled alike only: compare the numbers of the usage columns.
        if got[:3] != want[:3] or any(float(a) != float(b) for a, b in zip(got[3:], want[3:])):
            return f"{k}: {got}, the per-seed rows give {want}"
    return None


def check_fingerprint(old, new, differing):
    ol, nl = old.decode().splitlines(), new.decode().splitlines()
    if len(ol) != len(nl):
        return False
    for a, b in zip(ol, nl):
        if a == b:
            continue
        name = a.split(" = ")[0]
        if not (name.startswith("file.") and name[5:-7] in differing and name.endswith(".sha256")):
            return False
    return True


def main(old_root, new_root):
    files = set()
    for root in (old_root, new_root):
        for d, _, fs in os.walk(root):
            for f in fs:
                files.add(os.path.relpath(os.path.join(d, f), root))
    counts, fails = defaultdict(int), []
    differing = defaultdict(set)  # folder -> names of data files that differ
    pending = []
    for rel in sorted(files):
        o, n = os.path.join(old_root, rel), os.path.join(new_root, rel)
        if not (os.path.exists(o) and os.path.exists(n)):
            fails.append(f"{rel}: in {'the new' if os.path.exists(n) else 'the old'} folder only")
            continue
        a, b = open(o, "rb").read(), open(n, "rb").read()
        if a == b:
            counts["identical"] += 1
            continue
        differing[os.path.dirname(rel)].add(os.path.basename(rel))
        pending.append((rel, a, b))
    for rel, a, b in pending:
        name, folder = os.path.basename(rel), os.path.dirname(rel)
        od, nd = os.path.join(old_root, folder), os.path.join(new_root, folder)
        why = None
        if name in ("seeds.csv", "summary.csv"):
            ok = without_mutant_rows(os.path.join(od, name)) == b
        elif name == "frontiers.bin":
            ok = open(os.path.join(od, "plan.csv"), "rb").read() == open(os.path.join(nd, "plan.csv"), "rb").read() \
                and check_frontiers(od, nd, a, b)
        elif name == "seeds.parquet":
            twin = os.path.join(old_root, folder + "-clean", name)
            ok = os.path.exists(twin) and open(twin, "rb").read() == b
            if not os.path.exists(twin):
                why = f"no {folder}-clean to compare with"
        elif name == "mutants.csv":
            why = check_mutants(od, os.path.join(od, name), os.path.join(nd, name))
            ok = why is None
        elif name == "fingerprint.txt":
            ok = check_fingerprint(a, b, differing[folder])
        else:
            ok = False
        if ok:
            counts[f"{name}: differs only by the mutant change"] += 1
        else:
            fails.append(f"{rel}: differs" + (f" ({why})" if why else ""))
    for k in sorted(counts):
        print(f"{counts[k]:5d}  {k}")
    for f in fails:
        print(f"FAIL  {f}")
    return 1 if fails else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
