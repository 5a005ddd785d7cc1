# Stage 1: build a wheel of this tree. The alembic migrations are package data inside it,
# so the image needs no source tree for `noetl-celery db upgrade`.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY noetl_celery ./noetl_celery
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# Stage 2: the runtime image has the installed wheel (not an editable install of a tree).
FROM python:3.11-slim
COPY --from=build /dist/ /tmp/dist/
RUN pip install --no-cache-dir /tmp/dist/*.whl && rm -rf /tmp/dist
WORKDIR /app
# the example playbooks, for `docker compose run --rm cli run playbooks/examples/...`
COPY playbooks ./playbooks
# every process runs as an unprivileged user (uid 10001, numeric so Kubernetes'
# runAsNonRoot can check it); NOETL_HOME (caches, DuckDB files) is the one place it writes
RUN groupadd --system --gid 10001 noetl \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
       --shell /usr/sbin/nologin noetl \
    && mkdir -p /data && chown 10001:10001 /data
ENV NOETL_HOME=/data
USER 10001:10001
ENTRYPOINT ["noetl-celery"]
