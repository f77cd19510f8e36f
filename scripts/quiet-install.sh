# Sourced by the scripts that install Debian packages for their tests (as root, with apt-get).
#
# quiet_install PACKAGE...: installs the packages without starting the services they bring
# (a registry on port 5000, Prometheus on 9090, nginx on 80, each on every interface, where the
# tests start their own on loopback), and disables those services afterwards, so that none
# is left listening when the script ends or at the next boot. An operator's own
# /usr/sbin/policy-rc.d is left as it is.

# Its body runs in a subshell, so that its trap (which takes the policy away however the
# install ends, a kill included) is its own and not the calling script's.
quiet_install() (
    policy=/usr/sbin/policy-rc.d
    made=""
    status=0
    if [ ! -e "$policy" ]; then
        # invoke-rc.d and deb-systemd-invoke start no service while this says 101.
        trap '[ -n "$made" ] && rm -f "$policy"' EXIT
        trap 'exit 130' INT TERM
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made=1
    fi
    apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" ||
        status=$?
    [ -n "$made" ] && rm -f "$policy" && made=""
    if [ "$status" = 0 ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        for package in "$@"; do
            # A package's units, as dpkg lists them; not one of them is wanted running.
            dpkg -L "$package" 2>/dev/null | grep -E '/systemd/system/[^/]+\.(service|socket)$' |
                xargs -r -n1 basename | xargs -r systemctl disable --now >/dev/null 2>&1 || true
        done
    fi
    exit "$status"
)
