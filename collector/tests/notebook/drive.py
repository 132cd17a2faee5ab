"""Runs cells in a real Jupyter kernel (ipykernel, started by jupyter_client, headless) and prints
each cell's output as JSON lines: {"cell": source, "out": text}. Used by
`collector/tests/notebook.rs`; knows nothing of oomscope beyond the cells it is given.

    python drive.py WORKDIR CELLS.json
"""

import json
import sys

from jupyter_client.manager import start_new_kernel


def main():
    workdir, cells_path = sys.argv[1], sys.argv[2]
    with open(cells_path) as f:
        cells = json.load(f)
    km, kc = start_new_kernel(kernel_name="python3", cwd=workdir)
    try:
        for cell in cells:
            out = []

            def hook(msg, out=out):
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    out.append(content["text"])
                elif kind == "error":
                    out.append("ERROR %s: %s\n" % (content["ename"], content["evalue"]))
                elif kind in ("execute_result", "display_data"):
                    out.append(content["data"].get("text/plain", "") + "\n")

            kc.execute_interactive(cell, output_hook=hook, timeout=180)
            print(json.dumps({"cell": cell, "out": "".join(out)}), flush=True)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


if __name__ == "__main__":
    main()
