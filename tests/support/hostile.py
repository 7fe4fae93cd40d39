"""Hostile inputs shared by the tests of more than one surface."""

from __future__ import annotations

# The classic "billion laughs": 342 bytes (the was 489), 9**9 strings with every alias expanded.
ALIAS_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""

# A name (a principal, a tool, an upstream's text) that tries to become markup on a web page, reorder
# what follows it (a right-to-left override) and hide a character (a zero-width space); and how the
# gateway's console must show it: the markup as text, the invisible characters as visible escapes.
HOSTILE_NAME = '<img src=x onerror="window.__pwned=1">\u202eevil\u200b</td><script>window.__pwned=2</script>'
HOSTILE_NAME_SHOWN = '<img src=x onerror="window.__pwned=1">\\u202eevil\\u200b</td><script>window.__pwned=2</script>'
