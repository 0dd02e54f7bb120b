#!/usr/bin/env bash
# Best effort: make headless Chromium available for the test that opens the HTML report in a real
# browser (tests/test_render.py). Without it that one test is skipped and the report is validated
# with html.parser instead, so this script never fails the build. PLACEVIZ_NO_BROWSER=1 skips it.
set -uo pipefail
if [ "${PLACEVIZ_NO_BROWSER:-0}" = 1 ]; then
  exit 0
fi
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then
    exit 0
  fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "placeviz setup: installing Chromium for the HTML report's browser test (apt-get install chromium)" >&2
  export DEBIAN_FRONTEND=noninteractive
  if apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null 2>&1; }; then
    exit 0
  fi
fi
echo "placeviz setup: no Chromium; the HTML report's browser test will be skipped" >&2
exit 0
