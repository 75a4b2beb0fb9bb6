#!/usr/bin/env python3
"""Prints a .pptx's slides' text in order, after checking that every XML part parses."""
import posixpath
import sys
import zipfile
import xml.etree.ElementTree as ET

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
PKG = "{http://schemas.openxmlformats.org/package/2006/relationships}"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: read_pptx.py DECK.pptx")
    with zipfile.ZipFile(sys.argv[1]) as z:
        parts = {name: ET.fromstring(z.read(name)) for name in z.namelist()
                 if name.endswith(".xml") or name.endswith(".rels")}
    rels = {r.get("Id"): r.get("Target") for r in parts["ppt/_rels/presentation.xml.rels"].iter(f"{PKG}Relationship")}
    order = [rels[s.get(f"{R}id")] for s in parts["ppt/presentation.xml"].iter(f"{P}sldId")]
    print(f"{len(order)} slides")
    for n, target in enumerate(order, 1):
        slide = parts[posixpath.normpath(posixpath.join("ppt", target))]
        print(f"== slide {n}")
        for paragraph in slide.iter(f"{A}p"):
            text = "".join(t.text or "" for t in paragraph.iter(f"{A}t"))
            if text:
                print(text)
        pictures = len(list(slide.iter(f"{P}pic")))
        if pictures:
            print(f"[{pictures} picture(s)]")


if __name__ == "__main__":
    main()
