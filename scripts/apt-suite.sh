#!/bin/sh
# Helpers for the setup scripts: which Debian suite a package comes from, and
# bookworm-backports as an apt source. Sourced (`. scripts/apt-suite.sh`), not run.

# Adds bookworm-backports to apt's sources once (apt-get update after it is the
# caller's). Its packages are installed only when asked for (`-t bookworm-backports`)
# or when an installed package already comes from there.
add_backports() {
    f=/etc/apt/sources.list.d/stockade-bookworm-backports.sources
    [ -f "$f" ] && return 0
    cat >"$f" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
}

# The installed version of package $1, or nothing.
installed_version() {
    dpkg-query -W -f='${db:Status-Abbrev} ${Version}\n' "$1" 2>/dev/null |
        awk '$1 == "ii" {print $2}'
}

# Whether version $1 is a bookworm-backports build (Debian's `~bpoNN` suffix).
is_backports() {
    case "$1" in *~bpo*) return 0 ;; *) return 1 ;; esac
}
