"""``legged-wbc docs``: build the manual as a site (strict: every link, anchor and page checked), or serve it."""

from __future__ import annotations

import sys
from pathlib import Path


def cmd_docs(args) -> int:
    from legged_wbc.tools.site.build import SiteError, run

    try:
        if args.serve:
            print(f"serving the manual on http://{args.addr}/ (Ctrl-C stops)", flush=True)
            return run("serve", addr=args.addr).returncode
        out = Path(args.out).resolve()
        res = run("build", out=out)
    except SiteError as exc:
        print(f"legged-wbc docs: {exc}", file=sys.stderr)
        return 2
    if res.returncode == 0:
        print(f"wrote the manual to {out}/index.html")
    return res.returncode


def register(sub) -> None:
    s = sub.add_parser("docs", help="build the manual as a site (MkDocs, strict), or serve it on 127.0.0.1",
                       description="Build the manual (docs/, mkdocs.yml) into a static site with the API "
                                   "reference and the parameter tables generated from the code; strict: a "
                                   "broken link or anchor, a page outside the navigation or any warning fails "
                                   "the build. --serve serves it with live reload instead.")
    s.add_argument("--out", default="site", help="output directory of the build (default site/, git-ignored)")
    s.add_argument("--serve", action="store_true", help="serve the site with live reload instead of building it")
    s.add_argument("--addr", default="127.0.0.1:8000", help="address to serve on (default 127.0.0.1:8000)")
    s.set_defaults(func=cmd_docs)
