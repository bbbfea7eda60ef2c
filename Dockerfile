FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# Dependencies from the lock only (exact versions, hashes checked), pip and setuptools included
# (requirements/build.in); a layer of its own, rebuilt only when the lock changes.
COPY requirements/base.txt requirements/base.txt
RUN pip install --no-cache-dir --require-hashes -r requirements/base.txt
COPY pyproject.toml README.md ./
COPY portal portal
COPY checks checks
COPY worker worker
COPY testbed testbed
COPY templates templates
COPY manage.py ./
# Kiln itself: nothing more is resolved (--no-deps), and it is built with the locked setuptools
# rather than whatever an isolated build environment would download.
RUN pip install --no-cache-dir --no-deps --no-build-isolation .
RUN useradd --system --home /app kiln && mkdir /data && chown kiln /data
USER kiln
ENV KILN_DATA_DIR=/data
EXPOSE 8000
