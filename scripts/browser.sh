#!/usr/bin/env bash
# Chromium and its driver for the explorer's browser tests (tests/test_explore_browser.py), from Debian's packages.
# scripts/test.sh runs this; it installs them only where it can (root with apt-get, as in CI). Elsewhere the browser
# tests skip and say what to install (under CI=true they fail instead).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing chromium + chromium-driver for the browser tests (apt-get)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium chromium-driver; } >/dev/null 2>&1 || echo "apt-get could not install chromium" >&2
  fi
fi
