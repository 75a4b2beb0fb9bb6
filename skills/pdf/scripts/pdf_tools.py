#!/usr/bin/env python3
"""Reads and rearranges PDFs with pypdf: text, info, merge, split, rotate (see ../SKILL.md)."""
import os
import sys

from pypdf import PdfReader, PdfWriter


def page_numbers(spec, count):
    if not spec:
        return range(count)
    first, _, last = spec.partition("-")
    return range(int(first) - 1, min(count, int(last or first)))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__ + "\nusage: pdf_tools.py text|info|merge|split|rotate ...")
    command, args = sys.argv[1], sys.argv[2:]
    if command == "text":
        reader = PdfReader(args[0])
        pages = args[2] if len(args) > 2 and args[1] == "--pages" else None
        for n in page_numbers(pages, len(reader.pages)):
            print(f"== page {n + 1}")
            print(reader.pages[n].extract_text() or "")
    elif command == "info":
        reader = PdfReader(args[0])
        meta = reader.metadata or {}
        print(f"pages: {len(reader.pages)}")
        for key in ("/Title", "/Author", "/Producer"):
            if meta.get(key):
                print(f"{key[1:].lower()}: {meta[key]}")
        box = reader.pages[0].mediabox
        print(f"page size: {float(box.width):.0f} x {float(box.height):.0f} pt")
    elif command == "merge":
        writer = PdfWriter()
        for path in args[1:]:
            for page in PdfReader(path).pages:
                writer.add_page(page)
        with open(args[0], "wb") as f:
            writer.write(f)
        print(f"wrote {args[0]}: {len(writer.pages)} pages")
    elif command == "split":
        reader = PdfReader(args[0])
        os.makedirs(args[1], exist_ok=True)
        stem = os.path.splitext(os.path.basename(args[0]))[0]
        for n, page in enumerate(reader.pages, 1):
            writer = PdfWriter()
            writer.add_page(page)
            with open(os.path.join(args[1], f"{stem}-{n}.pdf"), "wb") as f:
                writer.write(f)
        print(f"wrote {len(reader.pages)} files to {args[1]}")
    elif command == "rotate":
        writer = PdfWriter()
        for page in PdfReader(args[0]).pages:
            writer.add_page(page.rotate(int(args[2])))
        with open(args[1], "wb") as f:
            writer.write(f)
        print(f"wrote {args[1]}")
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
