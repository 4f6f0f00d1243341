"""The Spark session the fleet pipeline runs in.

Local by default (``local[*]``); ``master="spark://host:port"`` runs the same job on a
standalone cluster. The web UI is off, the console progress bar is off and Spark's own
logs are cut down to errors, so the command's output stays readable. Java comes from the
machine: when it is missing (or too old for the installed pyspark) the error says so in
one line instead of a Py4J traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from reconciler.errors import ReconcileError

APP_NAME = "jetstream-gitops fleet drift"
MIN_JAVA = 17  # pyspark 4 needs Java 17+

_QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n%ex
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = off
logger.netty.name = io.netty
logger.netty.level = off
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""


class JavaMissing(ReconcileError):
    """No usable Java runtime for Spark."""


def java_executable() -> str:
    """The ``java`` Spark will use: ``$JAVA_HOME/bin/java`` or the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
        raise JavaMissing(f"JAVA_HOME={home} has no bin/java: point it at a Java {MIN_JAVA}+")
    found = shutil.which("java")
    if found is None:
        raise JavaMissing(
            f"Java not found: the fleet pipeline runs on Apache Spark, which needs Java "
            f"{MIN_JAVA}+ (Debian: apt-get install openjdk-{MIN_JAVA}-jre-headless, "
            "or set JAVA_HOME)"
        )
    return found


def java_major_version(java: str) -> int:
    """The major version of a ``java`` binary (8 for "1.8.0_392", 17 for "17.0.15")."""
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as err:
        raise JavaMissing(f"cannot run {java}: {err.strerror}") from err
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if match is None:
        raise JavaMissing(f"cannot tell the version of {java}: {done.stderr.strip()[:200]}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> str:
    """The java binary to use; raises :class:`JavaMissing` when absent or too old."""
    java = java_executable()
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise JavaMissing(f"{java} is Java {major}; Spark needs Java {MIN_JAVA} or newer")
    return java


def _log_config() -> Path:
    path = Path(tempfile.gettempdir()) / f"jetstream-gitops-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _QUIET_LOG4J2:
        path.write_text(_QUIET_LOG4J2)
    return path


def is_local(master: str) -> bool:
    return master.startswith("local")


def spark_session(master: str | None = None, *, shuffle_partitions: int = 8) -> SparkSession:
    """Start (or reuse) the session: ``local[*]`` unless ``master`` names a cluster.

    Workers run the same Python interpreter as the driver (``PYSPARK_PYTHON`` unless
    set); on a cluster every worker needs ``jetstream-gitops`` installed in it.
    """
    check_java()
    master = master or "local[*]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_opts = f"-Dlog4j2.configurationFile=file:{_log_config()}"
    builder = (
        SparkSession.builder.master(master)
        .appName(APP_NAME)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if is_local(master):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    try:
        session = builder.getOrCreate()
    except Exception as err:  # Py4J / PySparkRuntimeError: the JVM did not come up
        raise ReconcileError(f"cannot start Spark ({master}): {_first_line(err)}") from err
    session.sparkContext.setLogLevel("ERROR")
    return session


def active_context() -> SparkContext | None:
    """The running SparkContext, if any (used to reuse a session in tests)."""
    return SparkContext._active_spark_context


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
