"""`dumpctl compare --html`: two MindSpore-named dump trees that agree until one op, the real
dumpctl writing the report, and headless Chromium rendering it (a screenshot and the DOM).
The page must render with nothing fetched, show the chart and name the op that diverges."""

import os
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

from conftest import DUMPCTL

OPS = 30
DIVERGES_AT = 20
OP_TYPES = ["MatMul", "BiasAdd", "ReLU", "Conv2D", "BatchNorm", "Add"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def op_name(i):
    return f"Default_{OP_TYPES[i % len(OP_TYPES)]}-op{i}"


def write_tree(root, perturb):
    """rank_0/Net/0/0/ with input.0 and output.0 of each op, as MindSpore names them. With
    `perturb`, the output of op DIVERGES_AT and everything after it differ."""
    d = root / "rank_0" / "Net" / "0" / "0"
    d.mkdir(parents=True)
    rng = np.random.default_rng(7)
    noise = np.random.default_rng(99)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    for i in range(OPS):
        kind = OP_TYPES[i % len(OP_TYPES)]
        y = np.tanh(x * 0.9 + rng.standard_normal((8, 16)).astype(np.float32) * 0.5)
        if perturb and i == DIVERGES_AT:
            y = y + noise.standard_normal(y.shape).astype(np.float32)
        stem = f"{kind}.{op_name(i)}.{i}.0.{1700000000000000 + i}"
        np.save(d / f"{stem}.input.0.DefaultFormat.float32.npy", x)
        np.save(d / f"{stem}.output.0.DefaultFormat.float32.npy", y.astype(np.float32))
        x = y.astype(np.float32)


def distinct_colours(png):
    """Decodes an 8-bit, non-interlaced PNG (as Chromium writes them) with zlib and struct
    alone and returns the set of its pixel values."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, [], None
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and interlace == 0, header
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[colour_type]
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    previous = bytearray(stride)
    colours = set()
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = previous[i]
                c = previous[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        else:
            assert kind == 0, f"filter {kind}"
        colours.update(bytes(line[i:i + bpp]) for i in range(0, stride, bpp))
        previous = line
    return colours


def chromium(workdir, *args):
    # A profile of its own: parallel runs must not share one.
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
           f"--user-data-dir={workdir / 'chromium-profile'}", *args]
    return subprocess.run(cmd, capture_output=True, timeout=180, cwd=workdir)


@pytest.mark.conditional  # needs chromium
def test_the_report_renders_in_chromium_and_names_the_diverging_op(workdir):
    if not CHROMIUM:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    if not DUMPCTL or not os.path.exists(DUMPCTL):
        pytest.skip("DUMPCTL_BIN does not name the dumpctl binary")
    left, right = workdir / "left", workdir / "right"
    write_tree(left, perturb=False)
    write_tree(right, perturb=True)

    report = workdir / "report.html"
    out = subprocess.run([DUMPCTL, "compare", str(left), str(right), "--html", str(report), "-q"],
                         capture_output=True, text=True, timeout=120)
    # Exit code 1: some pair failed the thresholds (dumpctl/compare_command.h).
    assert out.returncode == 1, f"rc={out.returncode}\n{out.stdout}\n{out.stderr}"
    page = report.read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "http:" not in page and "https:" not in page
    assert op_name(DIVERGES_AT) in page

    shot = workdir / "shot.png"
    rendered = chromium(workdir, f"--screenshot={shot}", "--window-size=1400,1800",
                        report.as_uri())
    assert rendered.returncode == 0, rendered.stderr.decode(errors="replace")[-4000:]
    dom = chromium(workdir, "--dump-dom", report.as_uri())
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-4000:]
    text = dom.stdout.decode("utf-8", errors="replace")
    assert "<svg" in text and "</svg>" in text
    svg = text[text.index("<svg"):text.index("</svg>")]
    assert "first divergence" in svg and op_name(DIVERGES_AT) in svg, svg[-2000:]
    # Ops before the divergence pass: none of them is in the table of failing pairs.
    table = text[text.index("<table"):text.index("</table>")]
    assert op_name(DIVERGES_AT) in table
    assert op_name(DIVERGES_AT - 1) + "<" not in table

    assert shot.exists() and shot.stat().st_size > 0
    colours = distinct_colours(shot.read_bytes())
    assert len(colours) > 3, f"the screenshot looks blank: {len(colours)} colours"
