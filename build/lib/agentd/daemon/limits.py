"""Process limits `agentd run` sets for itself: as many open descriptors as the system allows.

systemd starts services with a soft limit of 1,024 open files (and a hard one
of 524,288): the soft limit is there for programs that would break with more
(select()), which agentd is not. Agent files are opened on demand and a cap of
them stays open (store.max_open_files), but sockets count too, so a daemon
serving many chats at once wants the headroom.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("agentd")


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (logged); returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    if soft == infinite or (hard != infinite and soft >= hard):
        return soft, soft
    # an unlimited hard limit (macOS) still refuses an unlimited soft one: ask for a large number
    wanted = hard if hard != infinite else 1 << 20
    for target in (wanted, 10240):  # 10240: macOS's OPEN_MAX, when the larger one is refused
        if target <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            error = e
            continue
        log.info("raised the open-files limit from %d to %d", soft, target)
        return soft, target
    else:
        log.warning("cannot raise the open-files limit from %d: %s", soft, error)
    return soft, soft
