#!/usr/bin/env python3
"""Writes a PDF from light Markdown (see ../SKILL.md) with reportlab's platypus."""
import argparse
import html
import re

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.lib.units import cm
from reportlab.platypus import (Image, ListFlowable, ListItem, PageBreak, Paragraph, SimpleDocTemplate, Spacer,
                                Table, TableStyle)

STYLES = getSampleStyleSheet()


def inline(text):
    text = html.escape(text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
    return re.sub(r"\*([^*]+)\*", r"<i>\1</i>", text)


def number_pages(canvas, doc):
    canvas.setFont("Helvetica", 8)
    canvas.drawRightString(A4[0] - 2 * cm, 1.2 * cm, f"{doc.page}")


def table(lines):
    rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines
            if not re.fullmatch(r"\|?[\s:|-]+\|?", l.strip())]
    width = max(len(r) for r in rows)
    rows = [[Paragraph(inline(c), STYLES["BodyText"]) for c in r + [""] * (width - len(r))] for r in rows]
    t = Table(rows, repeatRows=1)
    t.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.grey),
                           ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#DDEBF7")),
                           ("VALIGN", (0, 0), (-1, -1), "TOP")]))
    return t


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--title")
    args = parser.parse_args()
    story = []
    if args.title:
        story.append(Paragraph(inline(args.title), STYLES["Title"]))
    with open(args.source, encoding="utf-8") as f:
        lines = f.read().splitlines()
    paragraph, bullets = [], []

    def flush():
        if paragraph:
            story.append(Paragraph(inline(" ".join(paragraph)), STYLES["BodyText"]))
            paragraph.clear()
        if bullets:
            story.append(ListFlowable([ListItem(Paragraph(inline(b), STYLES["BodyText"])) for b in bullets],
                                      bulletType="bullet"))
            bullets.clear()

    i = 0
    while i < len(lines):
        s = lines[i].strip()
        heading = re.match(r"(#{1,3})\s+(.*)", s)
        image = re.fullmatch(r"!\[([^\]]*)\]\(([^)]+)\)", s)
        if not s:
            flush()
        elif heading:
            flush()
            story.append(Paragraph(inline(heading.group(2)), STYLES[f"Heading{len(heading.group(1))}"]))
        elif s == "---":
            flush()
            story.append(PageBreak())
        elif image:
            flush()
            img = Image(image.group(2))
            scale = min(1.0, (A4[0] - 4 * cm) / img.drawWidth)
            img.drawWidth *= scale
            img.drawHeight *= scale
            story += [img, Paragraph(inline(image.group(1)), STYLES["Italic"]), Spacer(1, 6)]
        elif re.match(r"[-*]\s+", s):
            if paragraph:
                story.append(Paragraph(inline(" ".join(paragraph)), STYLES["BodyText"]))
                paragraph.clear()
            bullets.append(re.sub(r"^[-*]\s+", "", s))
        elif s.startswith("|"):
            flush()
            block = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                block.append(lines[i])
                i += 1
            story += [table(block), Spacer(1, 8)]
            continue
        else:
            paragraph.append(s)
        i += 1
    flush()
    doc = SimpleDocTemplate(args.output, pagesize=A4, leftMargin=2 * cm, rightMargin=2 * cm,
                            topMargin=2 * cm, bottomMargin=2 * cm, title=args.title or "")
    doc.build(story, onFirstPage=number_pages, onLaterPages=number_pages)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
