"""JSON for the host API that is safe inside HTML: `<`, `>`, `&`, U+2028 and U+2029 escaped."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

HTML_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


class SafeJSONResponse(JSONResponse):
    """JSON whose strings can be pasted into HTML or a <script> block without breaking out."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.translate(HTML_SAFE).encode("utf-8")
