# spark-gateway: one OpenAI-compatible URL in front of your engine instances.
#   docker build -t spark-gateway .
#   docker run -p 8080:8080 -v $PWD/deploy/gateway.example.yaml:/etc/spark-gateway/gateway.yaml:ro spark-gateway
# Without a mounted config, override CMD (e.g. `serve --host 0.0.0.0` serves the built-in twin fleet).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 gateway
COPY --from=build /install /usr/local
# The shipped policies and twin fleets, so `--fleet` and policy paths resolve inside the image.
COPY --chown=gateway:gateway policies /app/policies
COPY --chown=gateway:gateway deploy /app/deploy
WORKDIR /app
USER gateway
ENV PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2).status != 200)"
ENTRYPOINT ["spark-gateway"]
CMD ["serve", "--config", "/etc/spark-gateway/gateway.yaml", "--host", "0.0.0.0", "--port", "8080"]
