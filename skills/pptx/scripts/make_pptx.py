#!/usr/bin/env python3
"""Writes a .pptx from a JSON spec (see ../SKILL.md) with zipfile alone: the Office Open
XML parts of a presentation with one master, one layout, one theme and its slides."""
import json
import os
import struct
import sys
import zipfile
from xml.sax.saxutils import escape

NS = ('xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
      'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" '
      'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"')
REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
CT = "application/vnd.openxmlformats-officedocument.presentationml"
W, H = 12192000, 6858000  # 16:9, EMU
EMPTY_TREE = ('<p:nvGrpSpPr><p:cNvPr id="1" name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr>'
              '<p:grpSpPr><a:xfrm><a:off x="0" y="0"/><a:ext cx="0" cy="0"/><a:chOff x="0" y="0"/>'
              '<a:chExt cx="0" cy="0"/></a:xfrm></p:grpSpPr>')


def rels(entries):
    body = "".join(f'<Relationship Id="{i}" Type="{t}" Target="{target}"/>' for i, t, target in entries)
    return ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            f'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{body}</Relationships>')


def theme():
    colors = {"dk1": '<a:sysClr val="windowText" lastClr="000000"/>', "lt1": '<a:sysClr val="window" lastClr="FFFFFF"/>',
              "dk2": '<a:srgbClr val="1F2937"/>', "lt2": '<a:srgbClr val="F3F4F6"/>',
              "accent1": '<a:srgbClr val="2563EB"/>', "accent2": '<a:srgbClr val="F59E0B"/>',
              "accent3": '<a:srgbClr val="10B981"/>', "accent4": '<a:srgbClr val="EF4444"/>',
              "accent5": '<a:srgbClr val="8B5CF6"/>', "accent6": '<a:srgbClr val="06B6D4"/>',
              "hlink": '<a:srgbClr val="2563EB"/>', "folHlink": '<a:srgbClr val="7C3AED"/>'}
    scheme = "".join(f"<a:{k}>{v}</a:{k}>" for k, v in colors.items())
    fill = '<a:solidFill><a:schemeClr val="phClr"/></a:solidFill>'
    line = f'<a:ln w="9525">{fill}</a:ln>'
    return ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<a:theme xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" name="sandboxd">'
            f'<a:themeElements><a:clrScheme name="sandboxd">{scheme}</a:clrScheme>'
            '<a:fontScheme name="sandboxd"><a:majorFont><a:latin typeface="Calibri"/><a:ea typeface=""/><a:cs typeface=""/>'
            '</a:majorFont><a:minorFont><a:latin typeface="Calibri"/><a:ea typeface=""/><a:cs typeface=""/></a:minorFont>'
            f'</a:fontScheme><a:fmtScheme name="sandboxd"><a:fillStyleLst>{fill * 3}</a:fillStyleLst>'
            f'<a:lnStyleLst>{line * 3}</a:lnStyleLst>'
            f'<a:effectStyleLst>{"<a:effectStyle><a:effectLst/></a:effectStyle>" * 3}</a:effectStyleLst>'
            f'<a:bgFillStyleLst>{fill * 3}</a:bgFillStyleLst></a:fmtScheme></a:themeElements></a:theme>')


def text_box(shape_id, name, x, y, cx, cy, paragraphs):
    return (f'<p:sp><p:nvSpPr><p:cNvPr id="{shape_id}" name="{name}"/><p:cNvSpPr txBox="1"/><p:nvPr/></p:nvSpPr>'
            f'<p:spPr><a:xfrm><a:off x="{x}" y="{y}"/><a:ext cx="{cx}" cy="{cy}"/></a:xfrm>'
            '<a:prstGeom prst="rect"><a:avLst/></a:prstGeom></p:spPr>'
            f'<p:txBody><a:bodyPr wrap="square"><a:normAutofit/></a:bodyPr><a:lstStyle/>{"".join(paragraphs)}</p:txBody></p:sp>')


def run(text, size, bold=False, color=None):
    fill = f'<a:solidFill><a:srgbClr val="{color}"/></a:solidFill>' if color else ""
    weight = ' b="1"' if bold else ""
    return (f'<a:r><a:rPr lang="en-US" sz="{size}"{weight} dirty="0">{fill}</a:rPr>'
            f'<a:t>{escape(str(text))}</a:t></a:r>')


def bullet_paragraphs(items, level=0):
    out = []
    for item in items:
        if isinstance(item, list):
            out += bullet_paragraphs(item, level + 1)
            continue
        margin = 342900 + level * 457200
        out.append(f'<a:p><a:pPr marL="{margin}" lvl="{level}" indent="-342900"><a:buFont typeface="Arial"/>'
                   f'<a:buChar char="{"•" if level == 0 else "–"}"/><a:spcBef><a:spcPts val="600"/></a:spcBef></a:pPr>'
                   f'{run(item, 2400 if level == 0 else 2000)}</a:p>')
    return out


def image_size(path):
    with open(path, "rb") as f:
        head = f.read(32)
        if head[:8] == b"\x89PNG\r\n\x1a\n":
            return struct.unpack(">II", head[16:24])
        f.seek(2)
        while True:  # JPEG: walk the segments to a start-of-frame
            marker, length = struct.unpack(">HH", f.read(4))
            if marker in (0xFFC0, 0xFFC1, 0xFFC2):
                h, w = struct.unpack(">xHH", f.read(5))
                return w, h
            f.seek(length - 2, 1)


def picture(shape_id, rel_id, path, x, y, cx, cy):
    w, h = image_size(path)
    scale = min(cx / w, cy / h)
    pw, ph = int(w * scale), int(h * scale)
    x, y = x + (cx - pw) // 2, y + (cy - ph) // 2
    return (f'<p:pic><p:nvPicPr><p:cNvPr id="{shape_id}" name="Picture {shape_id}"/><p:cNvPicPr>'
            '<a:picLocks noChangeAspect="1"/></p:cNvPicPr><p:nvPr/></p:nvPicPr>'
            f'<p:blipFill><a:blip r:embed="{rel_id}"/><a:stretch><a:fillRect/></a:stretch></p:blipFill>'
            f'<p:spPr><a:xfrm><a:off x="{x}" y="{y}"/><a:ext cx="{pw}" cy="{ph}"/></a:xfrm>'
            '<a:prstGeom prst="rect"><a:avLst/></a:prstGeom></p:spPr></p:pic>')


def slide_xml(shapes):
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><p:sld {NS}><p:cSld><p:spTree>{EMPTY_TREE}'
            f'{"".join(shapes)}</p:spTree></p:cSld><p:clrMapOvr><a:masterClrMapping/></p:clrMapOvr></p:sld>')


def build(spec, out):
    slides, media = [], []  # slides: (xml, [(rel id, media name)])
    margin = 457200
    title_slide = [text_box(2, "Title", margin, 2130000, W - 2 * margin, 1470000,
                            [f'<a:p><a:pPr algn="ctr"/>{run(spec.get("title", ""), 4400, True, "1F2937")}</a:p>'])]
    if spec.get("subtitle"):
        title_slide.append(text_box(3, "Subtitle", margin, 3700000, W - 2 * margin, 900000,
                                    [f'<a:p><a:pPr algn="ctr"/>{run(spec["subtitle"], 2400, False, "6B7280")}</a:p>']))
    slides.append((slide_xml(title_slide), []))
    for s in spec.get("slides", []):
        shapes = [text_box(2, "Title", margin, 300000, W - 2 * margin, 1000000,
                           [f'<a:p>{run(s.get("title", ""), 3600, True, "1F2937")}</a:p>'])]
        body_y, body_h = 1450000, H - 1450000 - 400000
        bullets, image, images = s.get("bullets", []), s.get("image"), []
        text_w = (W - 2 * margin) // 2 if image and bullets else W - 2 * margin
        if bullets:
            shapes.append(text_box(3, "Body", margin, body_y, text_w, body_h, bullet_paragraphs(bullets)))
        if image:
            ext = os.path.splitext(image)[1].lower().lstrip(".").replace("jpg", "jpeg")
            name = f"image{len(media) + 1}.{ext}"
            media.append((name, image))
            x = margin + text_w if bullets else margin
            shapes.append(picture(4, "rId2", image, x, body_y, W - margin - x, body_h))
            images.append(("rId2", name))
        slides.append((slide_xml(shapes), images))

    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        overrides = [("/ppt/presentation.xml", f"{CT}.presentation.main+xml"),
                     ("/ppt/slideMasters/slideMaster1.xml", f"{CT}.slideMaster+xml"),
                     ("/ppt/slideLayouts/slideLayout1.xml", f"{CT}.slideLayout+xml"),
                     ("/ppt/theme/theme1.xml", "application/vnd.openxmlformats-officedocument.theme+xml"),
                     ("/docProps/core.xml", "application/vnd.openxmlformats-package.core-properties+xml"),
                     ("/docProps/app.xml", "application/vnd.openxmlformats-officedocument.extended-properties+xml")]
        overrides += [(f"/ppt/slides/slide{i}.xml", f"{CT}.slide+xml") for i in range(1, len(slides) + 1)]
        z.writestr("[Content_Types].xml",
                   '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                   '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
                   '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
                   '<Default Extension="xml" ContentType="application/xml"/>'
                   '<Default Extension="png" ContentType="image/png"/><Default Extension="jpeg" ContentType="image/jpeg"/>'
                   + "".join(f'<Override PartName="{p}" ContentType="{t}"/>' for p, t in overrides) + "</Types>")
        z.writestr("_rels/.rels", rels([
            ("rId1", f"{REL}/officeDocument", "ppt/presentation.xml"),
            ("rId2", "http://schemas.openxmlformats.org/package/2006/relationships/metadata/core-properties",
             "docProps/core.xml"),
            ("rId3", f"{REL}/extended-properties", "docProps/app.xml")]))
        z.writestr("docProps/core.xml",
                   '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><cp:coreProperties '
                   'xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
                   'xmlns:dc="http://purl.org/dc/elements/1.1/">'
                   f'<dc:title>{escape(spec.get("title", ""))}</dc:title><dc:creator>sandboxd</dc:creator>'
                   '</cp:coreProperties>')
        z.writestr("docProps/app.xml",
                   '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Properties '
                   'xmlns="http://schemas.openxmlformats.org/officeDocument/2006/extended-properties">'
                   f'<Application>sandboxd pptx skill</Application><Slides>{len(slides)}</Slides></Properties>')
        slide_ids = "".join(f'<p:sldId id="{255 + i}" r:id="rId{i + 2}"/>' for i in range(1, len(slides) + 1))
        z.writestr("ppt/presentation.xml",
                   f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><p:presentation {NS} saveSubsetFonts="1">'
                   '<p:sldMasterIdLst><p:sldMasterId id="2147483648" r:id="rId1"/></p:sldMasterIdLst>'
                   f'<p:sldIdLst>{slide_ids}</p:sldIdLst><p:sldSz cx="{W}" cy="{H}"/>'
                   '<p:notesSz cx="6858000" cy="9144000"/></p:presentation>')
        z.writestr("ppt/_rels/presentation.xml.rels", rels(
            [("rId1", f"{REL}/slideMaster", "slideMasters/slideMaster1.xml"), ("rId2", f"{REL}/theme", "theme/theme1.xml")]
            + [(f"rId{i + 2}", f"{REL}/slide", f"slides/slide{i}.xml") for i in range(1, len(slides) + 1)]))
        z.writestr("ppt/slideMasters/slideMaster1.xml",
                   f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><p:sldMaster {NS}><p:cSld><p:bg><p:bgPr>'
                   '<a:solidFill><a:schemeClr val="bg1"/></a:solidFill><a:effectLst/></p:bgPr></p:bg>'
                   f'<p:spTree>{EMPTY_TREE}</p:spTree></p:cSld>'
                   '<p:clrMap bg1="lt1" tx1="dk1" bg2="lt2" tx2="dk2" accent1="accent1" accent2="accent2" '
                   'accent3="accent3" accent4="accent4" accent5="accent5" accent6="accent6" hlink="hlink" '
                   'folHlink="folHlink"/><p:sldLayoutIdLst><p:sldLayoutId id="2147483649" r:id="rId1"/>'
                   '</p:sldLayoutIdLst></p:sldMaster>')
        z.writestr("ppt/slideMasters/_rels/slideMaster1.xml.rels", rels([
            ("rId1", f"{REL}/slideLayout", "../slideLayouts/slideLayout1.xml"),
            ("rId2", f"{REL}/theme", "../theme/theme1.xml")]))
        z.writestr("ppt/slideLayouts/slideLayout1.xml",
                   f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><p:sldLayout {NS} type="blank" preserve="1">'
                   f'<p:cSld name="Blank"><p:spTree>{EMPTY_TREE}</p:spTree></p:cSld>'
                   '<p:clrMapOvr><a:masterClrMapping/></p:clrMapOvr></p:sldLayout>')
        z.writestr("ppt/slideLayouts/_rels/slideLayout1.xml.rels",
                   rels([("rId1", f"{REL}/slideMaster", "../slideMasters/slideMaster1.xml")]))
        z.writestr("ppt/theme/theme1.xml", theme())
        for i, (xml, images) in enumerate(slides, 1):
            z.writestr(f"ppt/slides/slide{i}.xml", xml)
            z.writestr(f"ppt/slides/_rels/slide{i}.xml.rels", rels(
                [("rId1", f"{REL}/slideLayout", "../slideLayouts/slideLayout1.xml")]
                + [(rid, f"{REL}/image", f"../media/{name}") for rid, name in images]))
        for name, path in media:
            z.write(path, f"ppt/media/{name}")
    return len(slides)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_pptx.py DECK.json OUT.pptx")
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    count = build(spec, sys.argv[2])
    print(f"wrote {sys.argv[2]}: {count} slides")


if __name__ == "__main__":
    main()
