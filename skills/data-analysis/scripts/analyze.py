#!/usr/bin/env python3
"""Profiles a CSV/TSV/Excel table with pandas, draws a chart with matplotlib and writes a
short Markdown report (see ../SKILL.md)."""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def load(path, sheet):
    ext = os.path.splitext(path)[1].lower()
    if ext in (".xlsx", ".xlsm", ".xls"):
        return pd.read_excel(path, sheet_name=sheet or 0)
    return pd.read_csv(path, sep="\t" if ext == ".tsv" else None, engine="python")


def table(frame):
    """A DataFrame as a Markdown table (no tabulate dependency)."""
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join("" if pd.isna(v) else (f"{v:,.4g}" if isinstance(v, float) else str(v)) for v in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([header, rule] + rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--out", default="/mnt/user-data/outputs")
    parser.add_argument("--group-by")
    parser.add_argument("--value")
    parser.add_argument("--x")
    parser.add_argument("--sheet")
    args = parser.parse_args()
    df = load(args.path, args.sheet)
    os.makedirs(args.out, exist_ok=True)
    numeric = df.select_dtypes("number")
    value = args.value or (numeric.columns[0] if len(numeric.columns) else None)

    lines = [f"# Analysis of {os.path.basename(args.path)}", "",
             f"{len(df)} rows, {len(df.columns)} columns.", "", "## Columns", ""]
    profile = pd.DataFrame({
        "column": df.columns,
        "type": [str(t) for t in df.dtypes],
        "missing": [int(df[c].isna().sum()) for c in df.columns],
        "mean": [df[c].mean() if c in numeric else None for c in df.columns],
        "min": [df[c].min() if c in numeric else None for c in df.columns],
        "max": [df[c].max() if c in numeric else None for c in df.columns],
    })
    lines += [table(profile), ""]
    if len(numeric.columns):
        numeric.describe().to_csv(os.path.join(args.out, "summary.csv"))

    chart = os.path.join(args.out, "chart.png")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if args.group_by and value:
        grouped = df.groupby(args.group_by, sort=True)[value].agg(["sum", "mean", "count"]).reset_index()
        lines += [f"## {value} by {args.group_by}", "", table(grouped), ""]
        ax.bar(grouped[args.group_by].astype(str), grouped["sum"], color="#2563EB")
        ax.set_xlabel(args.group_by)
        ax.set_ylabel(f"{value} (sum)")
        ax.set_title(f"{value} by {args.group_by}")
    elif value:
        x = df[args.x] if args.x else df.index
        ax.plot(x.astype(str) if args.x else x, df[value], marker="o", color="#2563EB")
        ax.set_xlabel(args.x or "row")
        ax.set_ylabel(value)
        ax.set_title(f"{value}" + (f" over {args.x}" if args.x else ""))
        ax.tick_params(axis="x", labelrotation=45)
    else:
        ax.text(0.5, 0.5, "no numeric column", ha="center")
    fig.tight_layout()
    fig.savefig(chart, dpi=150)
    lines += ["## Chart", "", "![chart](chart.png)", ""]
    report = "\n".join(lines)
    with open(os.path.join(args.out, "report.md"), "w", encoding="utf-8") as f:
        f.write(report)
    print(report)
    print(f"wrote {os.path.join(args.out, 'report.md')}, {chart}")


if __name__ == "__main__":
    main()
