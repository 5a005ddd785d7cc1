FROM python:3.11-slim
WORKDIR /app
COPY . /app
# editable install: `noetl-celery db upgrade` runs the alembic migrations of this tree
RUN pip install --no-cache-dir -e .
ENV NOETL_HOME=/data
ENTRYPOINT ["noetl-celery"]
