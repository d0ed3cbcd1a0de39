"""Deterministic demo images for the vision-language zoo model (drawn, never downloaded)."""

from __future__ import annotations


def demo_image(width: int, height: int, index: int = 0):
    """A PIL image: a two-colour gradient with a bright square whose place depends on ``index``."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height))
    pixels = image.load()
    for y in range(height):
        for x in range(width):
            pixels[x, y] = (int(255 * x / max(1, width - 1)), (40 * index) % 256, int(255 * y / max(1, height - 1)))
    draw = ImageDraw.Draw(image)
    side = max(2, min(width, height) // 3)
    corners = [(0, 0), (width - side, 0), (0, height - side), (width - side, height - side)]
    x, y = corners[index % 4]
    draw.rectangle([x, y, x + side - 1, y + side - 1], fill=(255, 255, 255))
    return image


def demo_images(sizes) -> list:
    """One demo image per (width, height), each with its own square position."""
    return [demo_image(w, h, i) for i, (w, h) in enumerate(sizes)]
