"""Who a user is: the one rule for user names, for tokens and for the jobs submitted for
them, and the one role a name holds.

Jobs belong to a user name, so a name must be one a token can be issued for (a job for
``zoë`` or ``../root`` could never be seen by its owner), and a name keeps the role of its
first token: a user token is never issued for a name an admin token was issued for, since
it would read that admin's own jobs. Admin is a role a token carries, not a name.
"""

from __future__ import annotations

import re

__all__ = ["USER_NAME_RULE", "check_user_name"]

#: what a user name may be, as error messages say it
USER_NAME_RULE = (
    "must be 1-63 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"
)
_USER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def check_user_name(value: str) -> str:
    """``value`` if it is a user name a token can be issued for; ValueError otherwise."""
    if not _USER.fullmatch(value):
        raise ValueError(USER_NAME_RULE)
    return value
