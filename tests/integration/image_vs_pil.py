"""src/data/image against the Python stack it replaces (docs/datasets.md, "Decoding and transforms"):
- decoded pixels against PIL's Image.open(...).convert("RGB"): photo-sized RGB JPEGs (quality 90),
  grayscale and CMYK JPEGs, palette, RGBA and 16-bit PNGs;
- crops against torchvision.transforms.v2.functional.resized_crop(antialias=True) on PIL's pixels,
  as PSNR (peak 1.0, values x / 255): the full-size path, the DCT-downscaled decode path, the
  eval centre crop (Resize + CenterCrop);
- region decodes (decode(..., &box)): files from PIL's encoder in its variants (subsampling, quality,
  progressive, optimised Huffman tables, EXIF, restart markers) take the region path, their crops
  equal our whole-decode crops and match torchvision;
- the RandomResizedCrop rule: our draws replayed through torchvision's own get_params give our boxes;
- bad files (truncated JPEG, zero bytes, text, a PNG with a flipped CRC byte): exit 2, one line.

Usage: image_vs_pil.py PATH/TO/image_probe
"""
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import types
import zlib

import numpy as np
import torch
import torchvision
import torchvision.transforms.v2.functional as F
from PIL import Image
from torchvision.transforms import RandomResizedCrop

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from claims import bound  # noqa: E402

PROBE = sys.argv[1]
# The bounds docs/datasets.md states, each a little under its measurement on this VM so that another
# CPU's float summation order (full-size crops) or JPEG rounding (the rest) still passes
# (tests/claims.toml: the figures, the measured values and the reasons):
MIN_PSNR = bound("images.full_crop_psnr")  # full-size crops: the same filter, float rounding only
MIN_PSNR_DCT = bound("images.dct_crop_psnr")  # crops of a scaled-IDCT decode: a different, cheaper downscale
MIN_PSNR_CENTER = bound("images.center_crop_psnr")  # the eval crop's one box, edges rounded to source pixels
MIN_PSNR_REGION = bound("images.region_vs_tv_psnr")  # region decode (+ DCT scale) crops vs torchvision at full size
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def probe(*args):
    return subprocess.run([PROBE, *map(str, args)], capture_output=True, text=True)


def photo(w, h, seed):
    """Smooth colour gradients and shapes plus sensor-like noise: JPEG-compresses like a photo."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([128 + 100 * np.sin(x / (17 + 9 * c) + y / (23 + 5 * c) + c) for c in range(3)], -1)
    img[(x - w / 3) ** 2 + (y - h / 2) ** 2 < (h / 4) ** 2] = [230, 40, 60]
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def png16(path, rgb16):
    """A 16-bit RGB PNG (PIL cannot write one): signature, IHDR, one IDAT, IEND."""
    h, w, _ = rgb16.shape
    raw = b"".join(b"\0" + rgb16[r].astype(">u2").tobytes() for r in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def decoded(path, min_w=0, min_h=0):
    out = path + ".raw"
    r = probe("decode", path, out, *((min_w, min_h) if min_w or min_h else ()))
    assert r.returncode == 0, r.stderr
    raw = np.fromfile(out, np.uint8)
    w, h = np.frombuffer(raw[:8].tobytes(), np.int32)
    return raw[8:].reshape(h, w, 3)


def ours_crop(path, box, out_hw, min_wh=None, flip=False):
    out = path + ".crop"
    args = ["crop", path, *box, *out_hw, out] + (list(min_wh) if min_wh else []) + (["flip"] if flip else [])
    r = probe(*args)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, np.float32).reshape(3, *out_hw), r.stdout.split()[1]


def psnr(a, b):
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * math.log10(1.0 / mse)


def pil_tensor(path):
    """PIL's pixels as float CHW in [0, 1]: what ToTensor gives torchvision's transforms."""
    return torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy()).permute(2, 0, 1).double() / 255


def make_files(d):
    files = {}
    for name, (w, h) in {"photo_500x375": (500, 375), "photo_640x480": (640, 480), "photo_333x500": (333, 500)}.items():
        files[name] = os.path.join(d, name + ".jpg")
        Image.fromarray(photo(w, h, len(files))).save(files[name], quality=90)
    base = photo(320, 240, 9)
    files["gray_jpeg"] = os.path.join(d, "gray.jpg")
    Image.fromarray(base).convert("L").save(files["gray_jpeg"], quality=90)
    files["cmyk_jpeg"] = os.path.join(d, "cmyk.jpg")
    Image.fromarray(base).convert("CMYK").save(files["cmyk_jpeg"], quality=90)
    files["palette_png"] = os.path.join(d, "palette.png")
    Image.fromarray(base).convert("P", palette=Image.Palette.ADAPTIVE, colors=50).save(files["palette_png"])
    files["rgba_png"] = os.path.join(d, "rgba.png")
    rgba = np.dstack([base, (np.arange(240 * 320) % 256).reshape(240, 320).astype(np.uint8)])
    Image.fromarray(rgba, "RGBA").save(files["rgba_png"])
    files["rgb16_png"] = os.path.join(d, "rgb16.png")
    png16(files["rgb16_png"], base.astype(np.uint16) * 257 + np.arange(320, dtype=np.uint16)[None, :, None] % 200)
    return files


def check_decode(files):
    for name, path in files.items():
        ours, pil = decoded(path), np.asarray(Image.open(path).convert("RGB"))
        diff = int(np.abs(ours.astype(int) - pil).max()) if ours.shape == pil.shape else -1
        check(diff == 0, f"decode {name} {pil.shape[1]}x{pil.shape[0]}: max |ours - PIL| = {diff} (want 0)")
    # 16-bit grayscale: PIL opens it as "I;16" and convert("RGB") clips to 255 (a PIL quirk); we take
    # the high byte like every other 16-bit PNG, so the comparison is with a >> 8.
    g = (np.arange(64 * 48).reshape(48, 64) * 21).astype(np.uint16)
    path = os.path.join(os.path.dirname(files["rgba_png"]), "gray16.png")
    Image.fromarray(g).save(path)
    check(Image.open(path).mode == "I;16", "a 16-bit grayscale PNG written (PIL mode I;16)")
    ours = decoded(path)
    check(np.array_equal(ours[..., 0], (g >> 8).astype(np.uint8)), "decode gray16_png: the high byte of each sample")


def check_crops(files):
    cases = [  # (file, (top, left, h, w), (out_h, out_w), flip)
        ("photo_500x375", (0, 0, 375, 500), (224, 224), False),  # whole image, downscale ~2x, ratio changes
        ("photo_500x375", (37, 81, 301, 250), (224, 224), True),  # RandomResizedCrop-like, flipped
        ("photo_640x480", (100, 200, 57, 91), (224, 224), False),  # small box: upscale
        ("photo_640x480", (5, 7, 470, 630), (112, 160), False),  # downscale ~4x
        ("photo_333x500", (10, 3, 224, 224), (224, 224), False),  # identity resampling
        ("cmyk_jpeg", (20, 30, 200, 150), (96, 64), True),
    ]
    worst = float("inf")
    for name, box, out_hw, flip in cases:
        ours, _ = ours_crop(files[name], box, out_hw, flip=flip)
        ref = F.resized_crop(pil_tensor(files[name]), *box, size=list(out_hw), antialias=True)
        if flip:
            ref = F.horizontal_flip(ref)
        p = psnr(ours, ref)
        worst = min(worst, p)
        check(p >= MIN_PSNR, f"crop {name} box {box} -> {out_hw}{' flip' if flip else ''}: PSNR {p:.1f} dB "
              f"vs torchvision resized_crop(antialias=True) (want >= {MIN_PSNR})")
    print(f"# full-size crops: worst PSNR {worst:.1f} dB")


def check_dct_crops(files):
    worst = float("inf")
    for name, box, out_hw in [("photo_640x480", (0, 0, 480, 640), (224, 224)),
                              ("photo_640x480", (40, 60, 400, 500), (112, 112)),
                              ("photo_500x375", (0, 0, 375, 500), (64, 64)),
                              ("photo_333x500", (50, 20, 300, 280), (128, 128))]:
        w, h = Image.open(files[name]).size
        min_wh = (math.ceil(w * out_hw[1] / box[3]), math.ceil(h * out_hw[0] / box[2]))  # decode_size_for_crop
        ours, scale = ours_crop(files[name], box, out_hw, min_wh=min_wh)
        ref = F.resized_crop(pil_tensor(files[name]), *box, size=list(out_hw), antialias=True)
        p = psnr(ours, ref)
        worst = min(worst, p)
        check(scale != "1/1" and p >= MIN_PSNR_DCT, f"DCT-scaled crop {name} box {box} -> {out_hw}: decoded at "
              f"{scale}, PSNR {p:.1f} dB vs torchvision at full size (want a scale < 1, >= {MIN_PSNR_DCT})")
    print(f"# DCT-scaled crops: worst PSNR {worst:.1f} dB")
    for name in ("photo_500x375", "photo_333x500"):
        out = files[name] + ".center"
        r = probe("center", files[name], 256, 224, out)
        assert r.returncode == 0, r.stderr
        ours = np.fromfile(out, np.float32).reshape(3, 224, 224)
        ref = F.center_crop(F.resize(pil_tensor(files[name]), [256], antialias=True), [224])
        p = psnr(ours, ref)
        check(p >= MIN_PSNR_CENTER, f"eval crop {name} ({r.stdout.split(chr(10))[0]}): PSNR {p:.1f} dB vs "
              f"torchvision Resize(256) + CenterCrop(224) (one box, edges rounded to source pixels; want >= "
              f"{MIN_PSNR_CENTER})")


def region_crop(path, box, out_hw, min_wh):
    out = path + ".rcrop"
    r = probe("rcrop", path, *box, *out_hw, out, *min_wh)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    return np.fromfile(out, np.float32).reshape(3, *out_hw), [int(v) for v in lines[0].split()[1:]]


def encoder_variants(d):
    """One photo through PIL's JPEG encoder options: each must pass the region path's EOI check."""
    base = Image.fromarray(photo(480, 360, 21))
    exif = Image.Exif()
    exif[0x010F], exif[0x0110] = "trainbox", "camera-like"  # Make, Model: an APP1 segment before the scan
    variants = {"q90_420": dict(quality=90), "q50_444": dict(quality=50, subsampling=0),
                "q95_422": dict(quality=95, subsampling=1), "progressive": dict(quality=85, progressive=True),
                "optimize": dict(quality=80, optimize=True), "exif": dict(quality=90, exif=exif.tobytes()),
                "restart_rows": dict(quality=90, restart_marker_rows=1)}
    files = {}
    for name, kw in variants.items():
        path = os.path.join(d, f"variant_{name}.jpg")
        try:
            base.save(path, **kw)
        except (TypeError, ValueError, OSError) as e:  # an older PIL without the option
            print(f"# variant {name} not written: {e}")
            continue
        files["variant_" + name] = path
    return files


def check_region_crops(d, files):
    jpegs = {n: p for n, p in files.items() if p.endswith(".jpg")}
    jpegs.update(encoder_variants(d))
    torch.manual_seed(0)
    worst_tv, worst_ours, n = float("inf"), float("inf"), 0
    for name, path in jpegs.items():
        w, h = Image.open(path).size
        ref_full = pil_tensor(path)
        boxes = [(0, 0, h // 3, w // 3)] + [tuple(RandomResizedCrop.get_params(ref_full, [0.08, 1.0], [3 / 4, 4 / 3]))
                                            for _ in range(8)]
        took_region = False
        for i, box in enumerate(boxes):
            out_hw = (224, 224) if i % 2 == 0 else (96, 128)
            min_wh = (math.ceil(w * out_hw[1] / box[3]), math.ceil(h * out_hw[0] / box[2]))  # decode_size_for_crop
            ours, region = region_crop(path, box, out_hw, min_wh)
            whole, scale = ours_crop(path, box, out_hw, min_wh=min_wh)
            ref = F.resized_crop(ref_full, *box, size=list(out_hw), antialias=True)
            p_ours, p_tv = psnr(ours, whole), psnr(ours, ref)
            worst_ours, worst_tv, n = min(worst_ours, p_ours), min(worst_tv, p_tv), n + 1
            num, den = map(int, scale.split("/"))
            took_region |= region[2] * region[3] < math.ceil(w * num / den) * math.ceil(h * num / den)
            # A region decode is the same IDCT of the same blocks: identical to the whole decode's crop.
            if not np.array_equal(ours, whole) or p_tv < MIN_PSNR_REGION:
                check(False, f"region crop {name} box {box} -> {out_hw} at {scale}, region {region}: PSNR "
                      f"{p_ours:.1f} dB vs our whole-decode crop (want identical), {p_tv:.1f} dB vs torchvision "
                      f"(want >= {MIN_PSNR_REGION})")
        check(took_region, f"region decode of {name} ({w}x{h}): decoded less than the whole image "
              "(the file passes the end-of-image check)")
    check(n > 0, f"region crops: {n} crops of {len(jpegs)} JPEGs: worst PSNR {worst_ours:.1f} dB vs our "
          f"whole-decode crops (want identical: inf), {worst_tv:.1f} dB vs torchvision (want >= {MIN_PSNR_REGION})")


class ReplayTorch:
    """torch, except that uniform_ and randint return the draws image_probe recorded."""

    def __init__(self, draws):
        self.draws = list(draws)

    def __getattr__(self, name):
        return getattr(torch, name)

    def _next(self, kind, lo, hi):
        k, rlo, rhi, v = self.draws.pop(0)
        assert k == kind and abs(rlo - float(lo)) < 1e-6 and abs(rhi - float(hi)) < 1e-6, (k, rlo, rhi, kind, lo, hi)
        return v

    def empty(self, *shape):
        outer = self

        class Sample:
            def uniform_(self, lo, hi):
                return torch.tensor([outer._next("u", lo, hi)], dtype=torch.float64)

        return Sample()

    def randint(self, lo, hi, size):
        return torch.tensor([self._next("i", lo, hi)])


def check_random_resized_crop():
    get_params = RandomResizedCrop.get_params
    for (w, h, s_lo, s_hi) in [(500, 375, 0.08, 1.0), (333, 500, 0.08, 1.0), (64, 64, 0.5, 1.0), (10, 1000, 0.9, 1.0)]:
        r = probe("rrc", w, h, s_lo, s_hi, 3 / 4, 4 / 3, 7, 300)
        assert r.returncode == 0, r.stderr
        same = 0
        lines = r.stdout.splitlines()
        for line in lines:
            rec = json.loads(line)
            fake = ReplayTorch(rec["draws"])
            replay = types.FunctionType(get_params.__code__, dict(get_params.__globals__, torch=fake))
            box = replay(torch.empty(3, h, w), [s_lo, s_hi], [3 / 4, 4 / 3])
            same += list(box) == rec["box"] and not fake.draws
        check(same == len(lines) == 300, f"RandomResizedCrop {w}x{h} scale ({s_lo}, {s_hi}): {same}/{len(lines)} "
              "boxes equal torchvision get_params fed the same draws")


def check_bad_files(d, files):
    jpg = open(files["photo_500x375"], "rb").read()
    png = bytearray(open(files["rgba_png"], "rb").read())
    idat = png.find(b"IDAT")
    length = struct.unpack(">I", png[idat - 4:idat])[0]
    png[idat + 4 + length + 3] ^= 0x01  # the last byte of IDAT's CRC
    bad = {"truncated.jpg": (jpg[:len(jpg) // 2], "truncated JPEG"), "empty.jpg": (b"", "zero bytes"),
           "notes.txt": (b"hello, this is text\n", "not an image (unknown format"),
           "crc.png": (bytes(png), "PNG CRC error in chunk IDAT")}
    for name, (data, reason) in bad.items():
        path = os.path.join(d, name)
        open(path, "wb").write(data)
        r = probe("decode", path, path + ".raw")
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and reason in lines[0],
              f"bad file {name}: exit {r.returncode}, {lines!r} (want 2 and one line with {reason!r})")
    # A region decode of the top rows stops long before the cut: the end-of-image check refuses it.
    path = os.path.join(d, "truncated.jpg")
    r = probe("rcrop", path, 0, 0, 50, 50, 32, 32, path + ".rcrop")
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "truncated JPEG" in lines[0],
          f"bad file truncated.jpg, region decode of its top rows: exit {r.returncode}, {lines!r} "
          "(want 2 and one line with 'truncated JPEG')")


def main():
    print(f"# torch {torch.__version__}, torchvision {torchvision.__version__}, PIL {Image.__version__}")
    with tempfile.TemporaryDirectory() as d:
        files = make_files(d)
        check_decode(files)
        check_crops(files)
        check_dct_crops(files)
        check_region_crops(d, files)
        check_random_resized_crop()
        check_bad_files(d, files)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all image checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
