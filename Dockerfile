FROM python:3.11-slim-bookworm
WORKDIR /app
# The runtime scope of the one list of Debian packages (requirements/debian.txt): WeasyPrint's pango and
# fonts, Chromium for the certificate's charts, the SSH client.
COPY requirements/debian.txt requirements/debian.txt
COPY scripts/system_packages.sh scripts/system_packages.sh
RUN apt-get update && apt-get install -y --no-install-recommends $(bash scripts/system_packages.sh runtime) \
  && rm -rf /var/lib/apt/lists/*
# Dependencies from the lock only (exact versions, hashes checked), pip and setuptools included
# (requirements/build.in); a layer of its own, rebuilt only when the lock changes.
# --no-deps: the lock is complete (scripts/check_lock.py proves it below), so nothing is resolved
# against the index, where a newer release than the lock's could be picked for a requested extra.
COPY requirements/base.txt requirements/build.in requirements/
RUN pip install --no-cache-dir --no-deps --require-hashes -r requirements/base.txt
# No simulator (testbed/) and no demo app (portal/demo, left out by .dockerignore): the demo runs from
# a checkout (`make up`), and the portal's settings leave it out where it is absent.
COPY pyproject.toml README.md ./
COPY portal portal
COPY checks checks
COPY worker worker
COPY manage.py ./
COPY scripts/check_lock.py scripts/check_lock.py
# Kiln itself: nothing more is resolved (--no-deps), and it is built with the locked setuptools
# rather than whatever an isolated build environment would download.
RUN pip install --no-cache-dir --no-deps --no-build-isolation . \
  && python scripts/check_lock.py requirements/base.txt --also requirements/build.in
RUN useradd --system --home /app kiln && mkdir /data && chown kiln /data
USER kiln
ENV KILN_DATA_DIR=/data
EXPOSE 8000
