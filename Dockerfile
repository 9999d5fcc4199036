# spark-gateway: one OpenAI-compatible URL in front of your engine instances.
#   docker build -t spark-gateway .
#   docker run -p 8080:8080 --add-host=host.docker.internal:host-gateway \
#     -v $PWD/deploy/gateway.docker.yaml:/etc/spark-gateway/gateway.yaml:ro spark-gateway
# Inside the container 127.0.0.1 is the container itself: engines on the host are reached as
# host.docker.internal (mapped to the host by the --add-host flag), engines under compose by their service
# name (deploy/compose.spark.yaml). Without a mounted config, override CMD (e.g. `serve --host 0.0.0.0`
# serves the built-in twin fleet).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
# The runtime dependencies only: no extras (tests, benchmarks' own tools) in the image.
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
# A fixed numeric user, so USER below and file ownership on mounted volumes mean the same on any host.
RUN groupadd --gid 10001 gateway && useradd --create-home --uid 10001 --gid 10001 gateway
COPY --from=build /install /usr/local
# The shipped policies and twin fleets, so `--fleet` and policy paths resolve inside the image.
COPY --chown=10001:10001 policies /app/policies
COPY --chown=10001:10001 deploy /app/deploy
WORKDIR /app
USER 10001:10001
ENV PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2).status != 200)"]
ENTRYPOINT ["spark-gateway"]
CMD ["serve", "--config", "/etc/spark-gateway/gateway.yaml", "--host", "0.0.0.0", "--port", "8080"]
