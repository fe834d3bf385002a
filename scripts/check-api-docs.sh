#!/usr/bin/env bash
# Builds the API reference of include/attnkit with Doxygen (docs/Doxyfile) and fails if any public
# symbol lacks its documentation comment or a comment has an error.
#
# Usage: scripts/check-api-docs.sh [OUTPUT_DIR]     (default: build/doxygen)
# Needs doxygen >= 1.9 on PATH. The HTML goes to OUTPUT_DIR/html, the warnings to OUTPUT_DIR/warnings.log.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

out="${1:-build/doxygen}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/warnings.log"
rm -rf "$out/xml"  # read below: no stale pages from an earlier run
rm -f "$log"

if ! command -v doxygen >/dev/null 2>&1; then
  echo "check-api-docs: doxygen not found on PATH" >&2
  exit 2
fi

version="$(sed -n 's/^project(attnkit VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"

status=0
# QUIET = YES: what doxygen writes to stderr is its warnings.
ATTNKIT_DOXYGEN_OUT="$out" ATTNKIT_VERSION="$version" doxygen docs/Doxyfile 2>"$log" || status=$?

if [[ -s "$log" ]]; then
  # Doxygen may report a namespace member twice (for the namespace and for the file).
  echo "check-api-docs: $(sort -u "$log" | wc -l) warning(s) from doxygen:" >&2
  sort -u "$log" >&2
  [[ $status -ne 0 ]] || status=1
fi
# Doxygen 1.9.4 does not warn about an undocumented enumerator, namespace or file; its XML output
# shows them with empty descriptions.
if [[ $status -eq 0 ]]; then
  python3 - "$out/xml" <<'PY' || status=1
import glob, sys
import xml.etree.ElementTree as ET

def documented(element):
    return any("".join(element.find(tag).itertext()).strip()
               for tag in ("briefdescription", "detaileddescription") if element.find(tag) is not None)

missing = set()
for path in sorted(glob.glob(sys.argv[1] + "/*.xml")):
    root = ET.parse(path).getroot()
    if root.tag != "doxygen":
        continue
    for compound in root.iter("compounddef"):
        name = compound.findtext("compoundname")
        location = compound.find("location")
        where = location.get("file") if location is not None else "?"
        if where == "[generated]":  # e.g. namespace std, which Doxygen makes up
            continue
        if compound.get("kind") in ("namespace", "file") and not documented(compound):
            missing.add(f"{where}: {compound.get('kind')} {name} is not documented")
        for member in compound.iter("memberdef"):
            if member.get("kind") != "enum":
                continue
            line = member.find("location").get("line")
            for value in member.iter("enumvalue"):
                if not documented(value):
                    missing.add(f"{member.find('location').get('file')}:{line}: enumerator "
                                f"{member.findtext('qualifiedname') or member.findtext('name')}::"
                                f"{value.findtext('name')} is not documented")
if missing:
    print("check-api-docs: undocumented symbols doxygen does not warn about:", file=sys.stderr)
for text in sorted(missing):
    print(text, file=sys.stderr)
sys.exit(1 if missing else 0)
PY
fi

if [[ $status -ne 0 ]]; then
  echo "check-api-docs: FAILED (status $status)" >&2
  exit "$status"
fi
echo "check-api-docs: no warnings; HTML reference in $out/html/index.html"
