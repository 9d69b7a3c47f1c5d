#!/usr/bin/env bash
# Install OpenJet into a virtual environment and put `openjet` on PATH.
#
#   ./install.sh              user install: venv in the user data dir, CuPy matching the driver,
#                             `openjet` linked into ~/.local/bin
#   ./install.sh --venv DIR   the same, with the venv in DIR
#   ./install.sh --dev        editable install of this checkout with the dev extra into ./.venv
#   --dry-run                 print the plan (venv, extras) and change nothing
#
# Idempotent: a rerun with nothing changed installs nothing (a stamp in the venv records what
# was installed), so it also works offline once done.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode="user"
venv=""
dry_run=0

say() { printf 'install.sh: %s\n' "$*"; }
die() { printf 'install.sh: error: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --dev) mode="dev" ;;
    --dry-run) dry_run=1 ;;
    --venv) [ $# -ge 2 ] || die "--venv needs a directory"; venv="$2"; shift ;;
    --venv=*) venv="${1#--venv=}" ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (try --help)" ;;
  esac
  shift
done

# --- Python ≥ 3.11 ---------------------------------------------------------------------------
python=""
for candidate in "${OPENJET_PYTHON:-}" python3.13 python3.12 python3.11 python3; do
  [ -n "$candidate" ] || continue
  if command -v "$candidate" >/dev/null 2>&1 &&
     "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    python="$(command -v "$candidate")"
    break
  fi
done
if [ -z "$python" ]; then
  if command -v python3 >/dev/null 2>&1; then
    die "OpenJet needs Python 3.11 or newer; found $(python3 --version 2>&1). Install a newer Python (e.g. 'apt install python3.11 python3.11-venv') or set OPENJET_PYTHON to one."
  fi
  die "no Python found. Install Python 3.11 or newer (e.g. 'apt install python3 python3-venv') and run this again."
fi
say "using $("$python" --version 2>&1) at $python"

# --- where the venv goes and which extras -------------------------------------------------
extras=""
if [ "$mode" = "dev" ]; then
  venv="${venv:-$here/.venv}"
  extras="dev"
else
  if [ -z "$venv" ]; then
    data_dir="$("$python" - <<'PY'
import os
from pathlib import Path
home = os.environ.get("OPENJET_HOME")
if home:
    print(Path(home).expanduser() / "data")
else:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    print(Path(base) / "openjet")
PY
)"
    venv="$data_dir/venv"
  fi
  if command -v nvidia-smi >/dev/null 2>&1; then
    cuda_major="$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' | head -n 1)"
    case "$cuda_major" in
      12) extras="cuda12"; say "NVIDIA driver supports CUDA 12: installing CuPy for CUDA 12" ;;
      1[3-9]) extras="cuda13"; say "NVIDIA driver supports CUDA $cuda_major: installing CuPy for CUDA 13" ;;
      "") say "nvidia-smi did not report a CUDA version: installing without CuPy (llama-server fallback)" ;;
      *) say "NVIDIA driver supports only CUDA $cuda_major (OpenJet's kernels need 12 or newer): installing without CuPy" ;;
    esac
  else
    say "no NVIDIA driver found: installing without CuPy (the engine will fall back to llama-server)"
  fi
fi

spec="$here"
[ -n "$extras" ] && spec="$here[$extras]"
stamp_value="$mode|$extras|$(cat "$here/pyproject.toml" "$here/openjet/__init__.py" | cksum)"
[ "$mode" = "user" ] && stamp_value="$stamp_value|$(cd "$here" && git rev-parse HEAD 2>/dev/null || date +%s)"

if [ "$dry_run" = 1 ]; then
  say "plan: mode=$mode venv=$venv extras=${extras:-none}"
  exit 0
fi

# --- the venv -------------------------------------------------------------------------------
if [ ! -x "$venv/bin/python" ]; then
  say "creating a virtual environment in $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" || die "could not create a virtual environment in $venv (on Debian/Ubuntu: apt install python3-venv)"
else
  say "virtual environment $venv already exists"
fi
vpy="$venv/bin/python"

if [ -f "$venv/.openjet-install-stamp" ] && [ "$(cat "$venv/.openjet-install-stamp")" = "$stamp_value" ]; then
  say "OpenJet is already installed there and up to date: nothing to install"
else
  index="$("$vpy" -m pip config get global.index-url 2>/dev/null || true)"
  index="${PIP_INDEX_URL:-${index:-https://pypi.org/simple}}"
  if ! "$vpy" - "$index" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/pip/", timeout=20).read(1)
PY
  then
    die "the package index $index cannot be reached: check the network (or PIP_INDEX_URL) and run this again"
  fi
  if [ "$mode" = "dev" ]; then
    say "installing this checkout in editable mode with the dev extra"
    "$vpy" -m pip install --disable-pip-version-check -q -e "$spec" || die "pip could not install $spec (see the messages above)"
  else
    say "installing OpenJet${extras:+ with the $extras extra}"
    "$vpy" -m pip install --disable-pip-version-check -q "$spec" || die "pip could not install $spec (see the messages above)"
  fi
  printf '%s' "$stamp_value" > "$venv/.openjet-install-stamp"
fi

# --- openjet on PATH (user install) ---------------------------------------------------------
if [ "$mode" = "user" ]; then
  bin_dir="$HOME/.local/bin"
  mkdir -p "$bin_dir"
  ln -sf "$venv/bin/openjet" "$bin_dir/openjet"
  say "linked $bin_dir/openjet -> $venv/bin/openjet"
  case ":$PATH:" in
    *":$bin_dir:"*) ;;
    *) say "note: $bin_dir is not on your PATH; add 'export PATH=\"$bin_dir:\$PATH\"' to your shell profile" ;;
  esac
  say "done: run 'openjet' (or $bin_dir/openjet)"
else
  say "done: dev environment in $venv (run tests with $venv/bin/python -m pytest)"
fi
