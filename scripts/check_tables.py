#!/usr/bin/env python3
"""Loads every table seedsweep wrote with pandas, polars and DuckDB, with no reader options,
and checks that each numeric column comes back numeric (integers as integers, floats as
floats) and each string column as strings or all-null.

    python3 scripts/check_tables.py DIR [DIR ...]

Every `*.csv` and `seeds.parquet` under the given folders whose name `src/results/schema.rs`
declares is loaded. The declared types are read from that file (the one owner of the
columns), so this script holds no copy of them. Needs pandas, polars, duckdb and pyarrow
(e.g. `python3 -m venv /tmp/venv && /tmp/venv/bin/pip install pandas polars duckdb pyarrow`).
Exit 1, with one line per problem, if any reader disagrees with the schema.
"""

import pathlib
import re
import sys

import duckdb
import pandas as pd
import polars as pl

ROOT = pathlib.Path(__file__).resolve().parent.parent


def declared():
    """{file name: [(column, type)]} from the column declarations in src/results/schema.rs:
    each `pub const X_COLUMNS: &[Col<...>]` list of constructor calls, one per column (the
    constructor names the Rust type, which gives the column's type)."""
    src = (ROOT / "src/results/schema.rs").read_text()
    ctor = {"str": "Str", "opt_str": "OptStr", "uint": "UInt", "opt_uint": "OptUInt",
            "count": "Int", "u32_": "Int", "micro": "Int", "float": "Float",
            "opt_float": "OptFloat", "boolean": "Bool"}
    lists = {}
    for m in re.finditer(r"pub const (\w+): &\[Col<\w+>\] = &\[(.*?)\n\];", src, re.S):
        lists[m.group(1)] = [(name, ctor[c]) for c, name in
                             re.findall(r'\b(\w+)(?:::<\w+>)?\(\s*"(\w+)"', m.group(2))]
    consts = {m.group(1): lists[m.group(2)] for m in re.finditer(
        r"pub const (\w+): &\[Column\] =\s*&names_and_types::<_, \{ (\w+)\.len\(\) \}>", src)}
    tables = re.search(r"pub const TABLES.*?= &\[(.*?)\];", src, re.S).group(1)
    out = {f: consts[c] for f, c in re.findall(r'\("([\w.]+)", (\w+)\)', tables)}
    out["seeds.parquet"] = out["seeds.csv"]
    return out


def kind(ty):
    return {"Str": "str", "OptStr": "str", "UInt": "int", "OptUInt": "int", "Int": "int",
            "Float": "float", "OptFloat": "float", "Bool": "bool"}[ty]


def pandas_kind(s):
    if pd.api.types.is_bool_dtype(s):
        return "bool"
    if pd.api.types.is_integer_dtype(s):
        return "int"
    if pd.api.types.is_float_dtype(s):
        return "float"
    return "str"


def polars_kind(dt):
    if dt == pl.Boolean:
        return "bool"
    if dt.is_integer():
        return "int"
    if dt.is_float():
        return "float"
    return "str"


def duck_kind(t):
    t = t.upper()
    if t == "BOOLEAN":
        return "bool"
    if t in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
             "UINTEGER", "UBIGINT"):
        return "int"
    if t in ("FLOAT", "DOUBLE") or t.startswith("DECIMAL"):
        return "float"
    return "str"


def ok(want, got, all_null, optional):
    if want == got:
        return True
    # pandas has no null integer in its default dtypes: an optional integer column with an
    # empty field reads as float (NaN for the empty fields).
    if optional and want == "int" and got == "float":
        return True
    # A column that is empty on every row (a clean run's `mutant`, a `note` no row needs)
    # has no type to infer: pandas makes it an all-NaN float, polars and DuckDB a null
    # string. Only a string column or an optional one may be all-empty.
    return all_null and (want == "str" or optional)


def check(path, cols, problems):
    name = path.name
    parquet = name.endswith(".parquet")
    frames = {}
    frames["pandas"] = pd.read_parquet(path) if parquet else pd.read_csv(path)
    frames["polars"] = pl.read_parquet(path) if parquet else pl.read_csv(path)
    con = duckdb.connect()
    rel = con.sql(f"FROM '{path}'")
    duck = dict(zip(rel.columns, [str(t) for t in rel.types]))
    nrows = len(frames["pandas"])
    want_names = [c for c, _ in cols]
    for reader, names in (("pandas", list(frames["pandas"].columns)),
                          ("polars", frames["polars"].columns), ("duckdb", list(duck))):
        if names != want_names:
            problems.append(f"{path}: {reader} reads columns {names}, not {want_names}")
            return
    if len(frames["polars"]) != nrows or con.execute(f"SELECT count(*) FROM '{path}'").fetchall()[0][0] != nrows:
        problems.append(f"{path}: the readers disagree on the row count")
    for col, ty in cols:
        want = kind(ty)
        all_null = bool(frames["pandas"][col].isna().all())
        optional = ty.startswith("Opt")
        got = {
            "pandas": pandas_kind(frames["pandas"][col]),
            "polars": polars_kind(frames["polars"][col].dtype),
            "duckdb": duck_kind(duck[col]),
        }
        for reader, g in got.items():
            if not ok(want, g, all_null, optional):
                problems.append(f"{path}: column {col} ({ty}) reads as {g} in {reader}")
    return nrows


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    schema = declared()
    problems = []
    seen = 0
    for d in argv[1:]:
        for path in sorted(pathlib.Path(d).rglob("*")):
            if path.name in schema and path.is_file():
                n = check(path, schema[path.name], problems)
                seen += 1
                print(f"{path}: {n} rows, pandas/polars/duckdb types as declared"
                      if not any(str(path) in p for p in problems) else f"{path}: PROBLEMS")
    for p in problems:
        print(p)
    if seen == 0:
        print("no seedsweep table found", file=sys.stderr)
        return 1
    print(f"{seen} tables checked, {len(problems)} problems "
          f"(pandas {pd.__version__}, polars {pl.__version__}, duckdb {duckdb.__version__})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
