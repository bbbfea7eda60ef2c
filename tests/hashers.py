"""A password hasher for the test processes only: PBKDF2 with one iteration.

Django's default PBKDF2 (1,000,000 rounds) costs about half a second of CPU per password, and the
suite creates and logs in a few thousand users: minutes of CPU that test nothing. The algorithm
name stays `pbkdf2_sha256`, and PBKDF2 reads its rounds from the stored hash, so servers and
workers that the tests start as subprocesses (with the production hashers) still verify these
passwords."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneRoundPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1
