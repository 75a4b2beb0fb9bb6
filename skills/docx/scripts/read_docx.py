#!/usr/bin/env python3
"""Prints a .docx's paragraphs (headings marked with #) and its tables as tab-separated rows."""
import sys

from docx import Document


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: read_docx.py FILE.docx")
    doc = Document(sys.argv[1])
    for p in doc.paragraphs:
        if not p.text.strip():
            continue
        style = p.style.name if p.style is not None else ""
        if style.startswith("Heading") or style == "Title":
            level = style.split()[-1] if style.split()[-1].isdigit() else "0"
            print("#" * max(1, int(level)) + " " + p.text)
        else:
            print(p.text)
    for n, table in enumerate(doc.tables, 1):
        print(f"== table {n}")
        for row in table.rows:
            print("\t".join(cell.text for cell in row.cells))


if __name__ == "__main__":
    main()
