#!/bin/sh
# Writes the example configuration file to stdout from a bucketdb binary (the first
# argument): every setting of the settings table in src/server/config.c, its help
# text (`serve --help`) and its default (`serve --print-config`), so the example
# cannot drift from the code. Used by `make install`; checked by
# tests/integration/test_install.py.
set -eu
BIN=${1:?usage: gen-config.sh BUCKETDB_BINARY}
HELP=$(mktemp)
trap 'rm -f "$HELP"' EXIT
# "  --flag-name   help text" lines after the flag list's heading; flag names use '-'
"$BIN" serve --help |
    sed -n '/^Every setting is also a flag/,$s/^  --\([a-z0-9-]*\) \{1,\}\(.*\)$/\1 \2/p' |
    awk '{ k = $1; gsub("-", "_", k); $1 = ""; sub(/^ /, ""); print k "\t" $0 }' >"$HELP"
cat <<'HEAD'
# bucketdb configuration: `bucketdb serve --config /etc/bucketdb/bucketdb.conf`.
#
# Generated from the settings table of this bucketdb build: every setting with its
# meaning and its default. A line is `key = value`; `#` starts a comment. Each setting
# below is commented out and so keeps its default: uncomment and change the ones you
# need. Command-line flags (`--key value`) win over this file. Value syntax (sizes
# 64MiB, durations 500ms 10s 2h 30d, booleans) and details: docs/CONFIG.md and
# bucketdb-serve(1). Check a changed file with
#   bucketdb serve --config FILE --check-config
HEAD
"$BIN" serve --print-config | while IFS= read -r line; do
    case "$line" in
    "# "*) # an empty text value: printed as a comment by --print-config
        key=${line#"# "}
        key=${key%% *}
        value="" ;;
    *)
        key=${line%% *}
        value=${line#*= } ;;
    esac
    help=$(awk -F '\t' -v k="$key" '$1 == k { print $2 }' "$HELP")
    echo
    echo "# ${help:-(no help text)}"
    if [ -n "$value" ]; then
        echo "#$key = $value"
    else
        echo "#$key ="
    fi
done
