FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY portal portal
COPY checks checks
COPY worker worker
COPY testbed testbed
COPY templates templates
COPY manage.py ./
RUN pip install --no-cache-dir .
RUN useradd --system --home /app kiln && mkdir /data && chown kiln /data
USER kiln
ENV KILN_DATA_DIR=/data
EXPOSE 8000
