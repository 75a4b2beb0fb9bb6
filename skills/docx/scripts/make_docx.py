#!/usr/bin/env python3
"""Writes a .docx from light Markdown (see ../SKILL.md) with python-docx."""
import argparse
import re

from docx import Document
from docx.enum.text import WD_BREAK

INLINE = re.compile(r"(\*\*[^*]+\*\*|\*[^*]+\*)")


def add_runs(paragraph, text):
    for part in INLINE.split(text):
        if not part:
            continue
        if part.startswith("**") and part.endswith("**"):
            paragraph.add_run(part[2:-2]).bold = True
        elif part.startswith("*") and part.endswith("*"):
            paragraph.add_run(part[1:-1]).italic = True
        else:
            paragraph.add_run(part)


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def add_table(doc, lines):
    rows = [cells(l) for l in lines if not re.fullmatch(r"\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?", l.strip())]
    width = max(len(r) for r in rows)
    table = doc.add_table(rows=len(rows), cols=width)
    table.style = "Table Grid"
    for i, row in enumerate(rows):
        for j in range(width):
            cell = table.cell(i, j)
            cell.text = row[j] if j < len(row) else ""
            if i == 0:
                for run in cell.paragraphs[0].runs:
                    run.bold = True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--title")
    args = parser.parse_args()
    doc = Document()
    if args.title:
        doc.add_heading(args.title, level=0)
    with open(args.source, encoding="utf-8") as f:
        lines = f.read().splitlines()
    paragraph = []
    i = 0

    def flush():
        if paragraph:
            add_runs(doc.add_paragraph(), " ".join(paragraph))
            paragraph.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        heading = re.match(r"(#{1,3})\s+(.*)", stripped)
        if not stripped:
            flush()
        elif heading:
            flush()
            doc.add_heading(heading.group(2), level=len(heading.group(1)))
        elif stripped == "---":
            flush()
            doc.add_paragraph().add_run().add_break(WD_BREAK.PAGE)
        elif re.match(r"[-*]\s+", stripped):
            flush()
            add_runs(doc.add_paragraph(style="List Bullet"), re.sub(r"^[-*]\s+", "", stripped))
        elif re.match(r"\d+[.)]\s+", stripped):
            flush()
            add_runs(doc.add_paragraph(style="List Number"), re.sub(r"^\d+[.)]\s+", "", stripped))
        elif stripped.startswith("|"):
            flush()
            block = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                block.append(lines[i])
                i += 1
            add_table(doc, block)
            continue
        else:
            paragraph.append(stripped)
        i += 1
    flush()
    doc.save(args.output)
    print(f"wrote {args.output}: {len(doc.paragraphs)} paragraphs, {len(doc.tables)} tables")


if __name__ == "__main__":
    main()
