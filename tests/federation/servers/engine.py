"""A small keyword engine built on rcpkit's server framework, configured by flags.

``python engine.py NAME [--docs JSON] [--delay-ms N] [--fail CODE] [--floor F]
[--max-k N] [--embed] [--http PORT]`` serves over stdio unless ``--http`` is given. ``--fail``
answers every retrieve with that error code; ``--delay-ms`` sleeps before answering.
Hits carry ``meta.source = NAME``. ``--embed`` adds a 2-d ``embed`` (input length, 1.0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from rcpkit.protocol.content import ContentBlock, text_of
from rcpkit.protocol.errors import error_from_wire
from rcpkit.protocol.types import EmbedParams, RetrieveParams
from rcpkit.server import Context, Server
from rcpkit.server.example import KeywordIndex
from rcpkit.transports.http import serve_http
from rcpkit.transports.stdio import serve_stdio


def build(args: argparse.Namespace) -> Server:
    index = KeywordIndex(json.loads(args.docs))
    server = Server(name=args.name, version="1.0")
    retrieve_cap: dict[str, Any] = {"maxK": args.max_k, "modes": ["sparse"]}
    if args.floor is not None:
        retrieve_cap["scoreFloor"] = args.floor
    server.capability("retrieve", retrieve_cap)
    server.capability("filter", {"fields": ["lang"]})
    server.capability("x-engine", {"name": args.name})
    if args.embed:
        server.capability("embed", {"dimension": 2, "identity": f"{args.name}-len"})

        @server.method("embed")
        def embed(params: EmbedParams, ctx: Context) -> dict[str, Any]:
            return {"vectors": [[float(len(str(item))), 1.0] for item in params.inputs],
                    "dimension": 2}

    @server.method("retrieve")
    async def retrieve(params: RetrieveParams, ctx: Context) -> dict[str, Any]:
        if args.delay_ms:
            await asyncio.sleep(args.delay_ms / 1000)
        if args.fail is not None:
            raise error_from_wire({"code": args.fail, "message": f"{args.name} is broken"})
        query = text_of([params.query] if isinstance(params.query, ContentBlock)
                        else params.query)
        hits = [{"id": doc_id, "score": score, "text": text,
                 "meta": {"source": args.name, "k": params.k}}
                for doc_id, score, text in index.search(query, params.k)]
        notes = [f"federation={json.dumps((params.meta or {}).get('federation'))}",
                 f"deadlineMs={(params.meta or {}).get('deadlineMs')}"]
        return {"hits": hits, "usage": {"notes": notes}}

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("--docs", default='{"d1": "alpha beta", "d2": "beta gamma"}')
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--fail", type=int, default=None)
    parser.add_argument("--floor", type=float, default=None)
    parser.add_argument("--max-k", type=int, default=50)
    parser.add_argument("--embed", action="store_true")
    parser.add_argument("--http", type=int, default=None)
    args = parser.parse_args()
    server = build(args)
    if args.http is None:
        serve_stdio(server)
    else:
        serve_http(server, "127.0.0.1", args.http)


if __name__ == "__main__":
    main()
