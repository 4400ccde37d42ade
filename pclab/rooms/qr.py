"""The join link as a QR code (segno: pure Python, no dependencies), drawn dark on white with
the standard quiet zone so a phone reads it from a projector, whatever the page's theme.

    python -c "from pclab.rooms.qr import png; open('qr.png', 'wb').write(png('http://x'))"
"""

from __future__ import annotations

import functools
import io

import segno


@functools.lru_cache(maxsize=128)
def png(link: str, scale: int = 10) -> bytes:
    """PNG bytes of `link`'s QR code, `scale` pixels a module (error correction M: 15%)."""
    if not 1 <= scale <= 40:
        raise ValueError(f"scale={scale} must be in [1, 40]")
    out = io.BytesIO()
    segno.make(link, error="m", micro=False).save(out, kind="png", scale=scale, border=4)
    return out.getvalue()
