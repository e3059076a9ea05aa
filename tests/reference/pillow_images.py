# Writes the image corpus of issue 39 and what Pillow makes of it: every PNG, JPEG and WebP mode
# a user's photo folder may hold, and the 8-bit RGB pixels of `Image.open(p).convert("RGB")`,
# which is exactly how timm's loader turns a file into an image. alkit's decoders are measured
# and tested against these pixels (a decoder that gives other pixels gives the model another
# input than PyTorch does).
#
# - tests/fixtures/pillow_images/*.{png,jpg,webp}: small images (48x40 and odd sizes such as
#   37x29), drawn by a formula (smooth gradients plus a checkerboard of edges), one per mode:
#   PNG 1-bit, L, L 4-bit and 2-bit (pypng), L with tRNS, LA, P 8/4/2/1-bit, P with tRNS,
#   RGB (even and odd size), RGB with tRNS, RGBA, I;16 (16-bit grayscale, two value ranges,
#   and with tRNS), 16-bit RGB, 16-bit RGBA and 16-bit LA (pypng: Pillow has no 16-bit colour
#   mode to save from; pypng writes the samples given as 16-bit big-endian PNG rows), interlaced
#   (Adam7) RGB and L (pypng: Pillow cannot write interlaced PNG); JPEG baseline 4:2:0 (even and
#   odd size), 4:2:2, 4:4:4, grayscale, quality 50, progressive, optimised Huffman tables with
#   restart markers, RGB stored without YCbCr (Pillow's keep_rgb, Adobe transform 0), CMYK as
#   Pillow writes it (Adobe marker, transform 0, inverted values as Photoshop stores them), YCCK
#   (Adobe transform 2, as Photoshop writes CMYK: Pillow encodes the YCC planes as a CMYK image
#   and the transform byte of its APP14 marker is then set to 2, so libjpeg decodes
#   YCCK -> CMYK), EXIF orientation 6 and 3; WebP lossy, lossy with alpha, lossless RGB and RGBA.
#   PNG has no palette+alpha colour type, so Pillow's PA mode cannot be written as PNG (Pillow:
#   "cannot write mode PA as PNG") and is not in the corpus.
# - pillow_images.json: Pillow's, libjpeg-turbo's, libwebp's versions, and per file: name,
#   format, how it was written, Pillow's mode and size on open, the EXIF orientation (null when
#   absent), and the pixels of `Image.open(p).convert("RGB")` as rows of (r, g, b) bytes: their
#   sha256 and the bytes themselves in base64. For an EXIF-rotated file also the sha256 of
#   `ImageOps.exif_transpose(...)` (what a loader that honoured the tag would give).
#
# timm's loader (timm 1.0.31, timm/data/dataset.py ImageDataset.__getitem__): the reader yields
# an open file, then `img = Image.open(img)` and `img = img.convert(self.input_img_mode)` with
# input_img_mode="RGB"; nothing in timm calls `ImageOps.exif_transpose` (no "exif" anywhere in
# its source), so timm feeds the stored pixels, NOT rotated by the EXIF orientation tag. Pillow
# itself never applies the tag on open or convert. So the recorded pixels are unrotated.
#
# Conversion rules of Pillow's convert("RGB") (verified with Pillow 13.0.0 on this corpus and on
# single pixels): 1 -> 0/255 replicated; L -> replicated; LA, RGBA -> alpha dropped (not
# composited on any background); P -> palette entry, tRNS ignored; I;16 -> min(v, 255)
# replicated (saturates, it does not keep the high byte; a tRNS key changes nothing); 16-bit
# RGB/RGBA PNGs are opened as RGB/RGBA with the high byte of each sample, and 16-bit gray+alpha
# is opened as RGBA (gray replicated, high byte); L with 1/2/4 bits -> scaled to 0..255
# (v * 255 / (2^bits - 1)); CMYK -> r = (255 - k) - muldiv255(c, 255 - k) with
# muldiv255(a, b) = ((a*b + 128) + ((a*b + 128) >> 8)) >> 8, likewise g from m and b from y;
# an Adobe-marked CMYK/YCCK JPEG is read as inverted ("CMYK;I") before that rule.
#
# Usage: python pillow_images.py  (needs pillow==13.0.0, numpy, pypng; run from anywhere)
#   python3 -m venv /tmp/venv-images && /tmp/venv-images/bin/pip install pillow==13.0.0 numpy pypng
import base64, hashlib, io, json, os, warnings
import numpy as np
import png as pypng
import PIL
from PIL import Image, ImageOps, features

assert PIL.__version__ == "13.0.0", f"Pillow {PIL.__version__}: record with Pillow 13.0.0"
assert features.check("webp"), "this Pillow has no WebP"
here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "..", "fixtures", "pillow_images")
os.makedirs(out, exist_ok=True)
for old in os.listdir(out):
    os.remove(os.path.join(out, old))


def planes(h, w, channels, k, scale=255.0):
    """Smooth waves plus a checkerboard of sharp edges, one plane per channel, in 0..scale."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    ps = []
    for c in range(channels):
        v = 0.5 + 0.35 * np.sin(0.11 * (c + k) * x + 0.07 * y) \
            * np.cos(0.05 * x - 0.13 * (k + 1) * y)
        v += 0.12 * ((x // 7 + y // 5 + c) % 2)
        ps.append(np.clip(v, 0, 1) * scale)
    return np.stack(ps, -1)


def u8(h, w, channels, k):
    return np.round(planes(h, w, channels, k)).astype(np.uint8)


def pil(mode, a):
    a = np.ascontiguousarray(a)
    return Image.frombytes(mode, (a.shape[1], a.shape[0]), a.tobytes())


def rgb(h, w, k):
    return pil("RGB", u8(h, w, 3, k))


def gray(h, w, k):
    return pil("L", u8(h, w, 1, k)[..., 0])


def alpha(h, w, k):
    """An alpha plane with fully transparent, opaque and partial pixels."""
    a = u8(h, w, 1, k + 5)[..., 0].astype(np.int32)
    a[: h // 4] = 0
    a[-h // 4:] = 255
    return a.astype(np.uint8)


written = []  # (name, how)


def save(name, im, how="Pillow", **kw):
    im.save(os.path.join(out, name), **kw)
    written.append((name, how))


def save_pypng(name, a, bitdepth, greyscale, alpha_, interlace=False):
    """a: (h, w, c) array of samples; written with pypng (Pillow cannot write these)."""
    h, w, c = a.shape
    wr = pypng.Writer(w, h, greyscale=greyscale, alpha=alpha_, bitdepth=bitdepth,
                      interlace=interlace)
    with open(os.path.join(out, name), "wb") as f:
        wr.write(f, a.reshape(h, w * c).tolist())
    how = f"pypng {pypng.__version__}, {bitdepth}-bit" + (", Adam7" if interlace else "")
    written.append((name, how))


W, H = 48, 40  # the usual size
OW, OH = 37, 29  # odd size: partial MCUs, odd chroma
# --- PNG ---
save("png_1bit.png", gray(OH, OW, 1).convert("1"))  # Floyd-Steinberg dithered: both levels
save("png_l.png", gray(H, W, 2))
save_pypng("png_l4.png", (u8(OH, OW, 1, 3) >> 4), 4, True, False)
save_pypng("png_l2.png", (u8(OH, OW, 1, 4) >> 6), 2, True, False)
save("png_l_trns.png", gray(H, W, 4), transparency=int(np.asarray(gray(H, W, 4))[3, 3]))
save("png_la.png", pil("LA", np.stack([u8(H, W, 1, 5)[..., 0], alpha(H, W, 5)], -1)))
save("png_p.png", rgb(H, W, 6).quantize(200))
save("png_p4.png", rgb(OH, OW, 7).quantize(16), bits=4)
save("png_p1.png", rgb(OH, OW, 7).quantize(2), bits=1)
save("png_p2.png", rgb(OH, OW, 7).quantize(4), bits=2)
p = rgb(H, W, 8).quantize(64)
save("png_p_trns.png", p, transparency=bytes([0, 64, 128, 200] + [255] * 60))
save("png_rgb.png", rgb(H, W, 9))
save("png_rgb_odd.png", rgb(OH, OW, 10))
px = np.asarray(rgb(H, W, 11))[5, 5]
save("png_rgb_trns.png", rgb(H, W, 11), transparency=tuple(int(v) for v in px))
save("png_rgba.png", pil("RGBA", np.concatenate([u8(H, W, 3, 12), alpha(H, W, 12)[..., None]], -1)))
# I;16 over the full range (nearly everything saturates) and over 0..1000 (where the rule shows)
def u16(h, w, channels, k, top):
    return np.round(planes(h, w, channels, k, top)).astype(np.uint16)


save("png_i16.png", Image.fromarray(u16(H, W, 1, 13, 65535.0)[..., 0]))
save("png_i16_low.png", Image.fromarray(u16(OH, OW, 1, 14, 1000.0)[..., 0]))
i16 = np.round(planes(OH, OW, 1, 14, 1000.0)[..., 0]).astype(np.uint16)
save("png_i16_trns.png", Image.fromarray(i16), transparency=int(i16[2, 2]))
save_pypng("png_rgb16.png", u16(H, W, 3, 15, 65535.0), 16, False, False)
a16 = np.concatenate([planes(OH, OW, 3, 16, 65535.0), alpha(OH, OW, 16)[..., None] * 257.0], -1)
save_pypng("png_rgba16.png", np.round(a16).astype(np.uint16), 16, False, True)
la16 = np.concatenate([planes(OH, OW, 1, 17, 65535.0), alpha(OH, OW, 17)[..., None] * 257.0], -1)
save_pypng("png_la16.png", np.round(la16).astype(np.uint16), 16, True, True)
save_pypng("png_rgb_interlaced.png", u8(H, W, 3, 18), 8, False, False, interlace=True)
save_pypng("png_l_interlaced.png", u8(OH, OW, 1, 19), 8, True, False, interlace=True)

# --- JPEG (Pillow's encoder is libjpeg-turbo) ---
save("jpeg_420.jpg", rgb(H, W, 20), quality=90, subsampling="4:2:0")
save("jpeg_420_odd.jpg", rgb(OH, OW, 21), quality=90, subsampling="4:2:0")
save("jpeg_422.jpg", rgb(H, W, 22), quality=90, subsampling="4:2:2")
save("jpeg_444.jpg", rgb(H, W, 23), quality=90, subsampling="4:4:4")
save("jpeg_gray.jpg", gray(OH, OW, 24), quality=90)
save("jpeg_q50.jpg", rgb(H, W, 25), quality=50)
save("jpeg_progressive.jpg", rgb(OH, OW, 26), quality=85, progressive=True)
save("jpeg_optimize_restart.jpg", rgb(H, W, 27), quality=85, optimize=True, restart_marker_blocks=4)
save("jpeg_rgb_keep.jpg", rgb(H, W, 28), quality=90, keep_rgb=True, subsampling="4:4:4")
cmyk = pil("CMYK", u8(H, W, 4, 29))
save("jpeg_cmyk.jpg", cmyk, quality=90)


def ycck(h, w, k):
    """A YCCK JPEG as Photoshop writes CMYK: Adobe APP14 transform 2, inverted K."""
    ink = planes(h, w, 4, k)  # c, m, y, k ink in 0..255
    r, g, b = ink[..., 0], ink[..., 1], ink[..., 2]
    Y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = -0.168735892 * r - 0.331264108 * g + 0.5 * b + 128
    cr = 0.5 * r - 0.418687589 * g - 0.081312411 * b + 128
    # Pillow stores 255 - value (rawmode CMYK;I); the file must hold Y, Cb, Cr and 255 - k
    stored = np.stack([Y, cb, cr, 255 - ink[..., 3]], -1)
    b_ = io.BytesIO()
    planes_ = np.clip(np.round(255 - stored), 0, 255).astype(np.uint8)
    pil("CMYK", planes_).save(b_, "JPEG", quality=90)
    data = bytearray(b_.getvalue())
    i = data.index(b"\xff\xee")
    assert data[i + 4:i + 9] == b"Adobe" and data[i + 15] == 0, "no Adobe transform 0 marker"
    data[i + 15] = 2  # marker, length(2), "Adobe", version(2), flags0(2), flags1(2), transform
    return bytes(data)


with open(os.path.join(out, "jpeg_ycck.jpg"), "wb") as f:
    f.write(ycck(OH, OW, 30))
written.append(("jpeg_ycck.jpg", "Pillow (YCC planes as CMYK), APP14 transform byte set to 2"))
for o in (6, 3):
    ex = Image.Exif()
    ex[0x0112] = o
    save(f"jpeg_exif{o}.jpg", rgb(H, OW, 30 + o), quality=90, exif=ex.tobytes())

# --- WebP (libwebp) ---
save("webp_lossy.webp", rgb(H, W, 40), quality=80)
def rgba(h, w, k):
    return pil("RGBA", np.concatenate([u8(h, w, 3, k), alpha(h, w, k)[..., None]], -1))


save("webp_lossy_alpha.webp", rgba(OH, OW, 41), quality=80)
save("webp_lossless.webp", rgb(H, W, 42), lossless=True)
save("webp_lossless_rgba.webp", rgba(OH, OW, 43), lossless=True)

files = []
for name, how in written:
    path = os.path.join(out, name)
    with Image.open(path) as im:
        mode, size, fmt = im.mode, im.size, im.format
        orientation = im.getexif().get(0x0112)
        info = {k: im.info[k] for k in ("adobe", "adobe_transform", "progressive", "interlace") if k in im.info}
        if "transparency" in im.info:
            info["transparency"] = True
        with warnings.catch_warnings():  # "Palette images with Transparency expressed in bytes..."
            warnings.simplefilter("ignore")
            px = im.convert("RGB").tobytes()  # what timm's loader does
    rec = dict(file=name, format=fmt, written_by=how, mode=mode, size=list(size), info=info,
               exif_orientation=orientation, bytes=os.path.getsize(path),
               rgb_sha256=hashlib.sha256(px).hexdigest(), rgb_base64=base64.b64encode(px).decode())
    assert len(px) == size[0] * size[1] * 3
    if orientation:
        with Image.open(path) as im:
            rec["exif_transposed_rgb_sha256"] = hashlib.sha256(ImageOps.exif_transpose(im).convert("RGB").tobytes()).hexdigest()
    files.append(rec)

ref = dict(
    pillow=PIL.__version__, libjpeg_turbo=features.version("libjpeg_turbo"),
    libwebp=features.version("webp"), zlib=features.version("zlib"),
    loader='Image.open(p).convert("RGB"), no EXIF transpose (timm 1.0.31 ImageDataset)',
    pixels="rgb_base64: height rows of width (r, g, b) byte triples", files=files)
with open(os.path.join(here, "pillow_images.json"), "w") as f:
    json.dump(ref, f, indent=1)
    f.write("\n")
total = sum(r["bytes"] for r in files)
for r in files:
    print(f'{r["file"]:28s} {r["mode"]:5s} {r["size"][0]:3d}x{r["size"][1]:<3d} {r["bytes"]:6d} {r["info"]} exif={r["exif_orientation"]}')
print(f"{len(files)} files, {total} bytes")
