#!/usr/bin/env python3
"""Prints each sheet of an .xlsx workbook: its size and first rows (formulas as written)."""
import argparse

from openpyxl import load_workbook


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--rows", type=int, default=20)
    args = parser.parse_args()
    wb = load_workbook(args.path)
    for ws in wb.worksheets:
        print(f"== {ws.title}: {ws.max_row} rows x {ws.max_column} columns")
        for row in ws.iter_rows(max_row=min(args.rows, ws.max_row), values_only=True):
            print("\t".join("" if v is None else str(v) for v in row))


if __name__ == "__main__":
    main()
