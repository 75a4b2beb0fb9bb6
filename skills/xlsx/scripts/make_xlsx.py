#!/usr/bin/env python3
"""Writes an .xlsx workbook from a JSON spec (see ../SKILL.md) with openpyxl."""
import json
import sys

from openpyxl import Workbook
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.utils import get_column_letter, column_index_from_string


def column_range(spec):
    """'B:D' or 'B' -> the column indexes it covers."""
    first, _, last = spec.partition(":")
    start = column_index_from_string(first)
    return range(start, column_index_from_string(last or first) + 1)


def write_sheet(ws, sheet):
    columns = sheet.get("columns", [])
    rows = sheet.get("rows", [])
    ws.append(columns)
    for cell in ws[1]:
        cell.font = Font(bold=True)
        cell.fill = PatternFill("solid", fgColor="DDEBF7")
        cell.alignment = Alignment(horizontal="center")
    for row in rows:
        ws.append(row)
    if sheet.get("totals") and rows:
        last = len(rows) + 1
        total_row = ["Total"] + [None] * (len(columns) - 1)
        for index in range(2, len(columns) + 1):
            values = [r[index - 1] for r in rows if len(r) >= index]
            if values and all(isinstance(v, (int, float)) or (isinstance(v, str) and v.startswith("=")) for v in values):
                letter = get_column_letter(index)
                total_row[index - 1] = f"=SUM({letter}2:{letter}{last})"
        ws.append(total_row)
        for cell in ws[ws.max_row]:
            cell.font = Font(bold=True)
    for spec, fmt in sheet.get("number_format", {}).items():
        for index in column_range(spec):
            for (cell,) in ws.iter_rows(min_row=2, min_col=index, max_col=index):
                cell.number_format = fmt
    for index in range(1, ws.max_column + 1):
        width = max(len(str(c.value)) if c.value is not None else 0 for (c,) in ws.iter_rows(min_col=index, max_col=index))
        ws.column_dimensions[get_column_letter(index)].width = min(max(10, width + 2), 60)
    ws.freeze_panes = "A2"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_xlsx.py SPEC.json OUT.xlsx")
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    wb = Workbook()
    wb.remove(wb.active)
    for sheet in spec.get("sheets", []):
        write_sheet(wb.create_sheet(sheet.get("name", f"Sheet{len(wb.sheetnames) + 1}")[:31]), sheet)
    if not wb.sheetnames:
        sys.exit("the spec has no sheets")
    wb.save(sys.argv[2])
    print(f"wrote {sys.argv[2]}: sheets {', '.join(wb.sheetnames)}")


if __name__ == "__main__":
    main()
