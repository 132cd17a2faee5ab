"""Writes the viewer's dist/index.html from viewer/index.html, the way trunk 0.21 does for it.

Why: proving viewer/dist fresh used to compile trunk (6-12 minutes of a fresh machine's first
test run) for three edits to one page. scripts/build-viewer.sh now builds the WASM with cargo,
wasm-bindgen and wasm-opt (the arguments trunk passes, from its 0.21.14 source) and this script
makes the page: the stylesheet inlined in place of its `data-trunk rel="inline"` link, the
module script that starts the viewer in place of the `data-trunk rel="rust"` link, and the
preload links with their sha384 integrity before </head>. The output is byte-identical to
`trunk build --release` (checked when this was written against the trunk-built viewer/dist)
but for the stylesheet, minified here (comments and spaces out: 0.5 KB of the viewer's 600 KB
gzipped budget); anything in index.html this script does not know stops it, so a change there
cannot slip by.

usage: python3 scripts/viewer_html.py viewer/index.html DIST_DIR > DIST_DIR/index.html
(DIST_DIR holds oomscope-viewer.js and oomscope-viewer_bg.wasm already)
"""

import base64
import hashlib
import os
import re
import sys

NAME = "oomscope-viewer"

SCRIPT = """
<script type="module">
import init, * as bindings from './{name}.js';
const wasm = await init({{ module_or_path: './{name}_bg.wasm' }});


window.wasmBindings = bindings;


dispatchEvent(new CustomEvent("TrunkApplicationStarted", {{detail: {{wasm}}}}));

</script>"""


def minified_css(css):
    """`css` without comments and the spaces its syntax does not need (around `{`, `}`, `;` and
    `,`; a space before `:` or `>` can be a descendant combinator, so those stay)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    css = re.sub(r"\s+", " ", css)
    return re.sub(r" ?([{};,]) ?", r"\1", css).strip()


def sri(path):
    with open(path, "rb") as f:
        return "sha384-" + base64.b64encode(hashlib.sha384(f.read()).digest()).decode()


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: viewer_html.py INDEX_HTML DIST_DIR")
    source, dist = sys.argv[1], sys.argv[2]
    with open(source) as f:
        page = f.read()
    here = os.path.dirname(os.path.abspath(source))
    links = re.findall(r"<link data-trunk [^>]*>", page)
    css = [l for l in links if 'rel="inline"' in l and 'type="css"' in l]
    rust = [l for l in links if 'rel="rust"' in l]
    if len(css) != 1 or len(rust) != 1 or len(links) != 2:
        sys.exit("viewer_html.py: index.html's trunk links changed (%s): teach this script or build with trunk" % links)
    if 'data-bindgen-target="web"' not in rust[0] or 'data-bin="%s"' % NAME not in rust[0]:
        sys.exit("viewer_html.py: the rust link is not a web-target %s: %s" % (NAME, rust[0]))
    href = re.search(r'href="([^"]+)"', css[0]).group(1)
    with open(os.path.join(here, href)) as f:
        style = minified_css(f.read())
    page = page.replace(css[0], "<style>" + style + "</style>")
    page = page.replace(rust[0], SCRIPT.format(name=NAME))
    preload = ('<link rel="modulepreload" href="./{name}.js" crossorigin="anonymous" integrity="{js}">'
               '<link rel="preload" href="./{name}_bg.wasm" crossorigin="anonymous" integrity="{wasm}" '
               'as="fetch" type="application/wasm">').format(
        name=NAME, js=sri(os.path.join(dist, NAME + ".js")), wasm=sri(os.path.join(dist, NAME + "_bg.wasm")))
    if page.count("</head>") != 1:
        sys.exit("viewer_html.py: index.html needs exactly one </head>")
    page = page.replace("</head>", preload + "</head>")
    sys.stdout.write(page)


if __name__ == "__main__":
    main()
