#!/usr/bin/env bash
# The tools (tools/) sit on top: nothing outside tools/ includes a header of theirs, so the library,
# the drawing library (lib/) and the Python extension build without them. An include is a tool's
# header when it names a path into tools/ or a file that exists under a tool's folder (the tools'
# include roots) and not beside the including file. The tools' own tests are exempt: they drive the
# commands in-process. Fails naming the file and the line.
set -euo pipefail
root="$1"

# Folders outside tools/ that hold C and C++ sources.
folders=(src include lib python tests fuzz examples)
# Files and folders (relative to the root) that test a tool from outside it.
tool_tests=(tests/cli/ fuzz/fuzz_cli_args.cpp)

exempt() {
  local relative="$1" entry
  for entry in "${tool_tests[@]}"; do
    [[ "$relative" == "$entry"* ]] && return 0
  done
  return 1
}

status=0
checked=0
for folder in "${folders[@]}"; do
  [[ -d "$root/$folder" ]] || continue
  while IFS= read -r hit; do
    file="${hit%%:*}"; rest="${hit#*:}"; line="${rest%%:*}"
    relative="${file#"$root"/}"
    exempt "$relative" && continue
    header=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' <<<"${rest#*:}")
    [[ -n "$header" ]] || continue
    checked=$((checked + 1))
    [[ -e "$(dirname "$file")/$header" && "$header" != *tools/* ]] && continue  # beside the file
    owner=""
    if [[ "$header" == *tools/* ]]; then
      owner="tools/"
    else
      for tool in "$root"/tools/*/; do
        [[ -e "$tool$header" ]] && { owner="tools/$(basename "$tool")/$header"; break; }
      done
    fi
    if [[ -n "$owner" ]]; then
      echo "$relative:$line includes \"$header\" ($owner): only tools/ may include a tool's headers"
      status=1
    fi
  done < <(grep -rnE --include='*.c' --include='*.h' --include='*.cpp' --include='*.hpp' \
                 '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$root/$folder" || true)
done
[[ $status -eq 0 ]] && echo "tools stay private: $checked includes outside tools/ checked"
exit $status
