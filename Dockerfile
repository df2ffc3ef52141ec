# The Waypoint worker image: slim Python, non-root, the package installed.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
RUN useradd --create-home --uid 10001 waypoint
WORKDIR /app
COPY pyproject.toml README.md worker.py ./
COPY waypoint ./waypoint
COPY workflows ./workflows
COPY activities ./activities
RUN pip install .

USER waypoint
ENV WAYPOINT_STATE_DIR=/home/waypoint/state
CMD ["python", "worker.py"]
