"""Writes a class-data-sharing archive of Spark's classes for this environment's test JVMs.

``make`` runs this once after pip, in .venv (the environment ``make test`` runs Spark from).
Every Spark JVM the tests start (drivers, executors, Connect servers, a standalone
cluster's daemons) loads and verifies ~17,000 classes from pyspark's jars before it runs
anything; Java 17's application class-data sharing maps them, already parsed and verified,
from this archive instead. A ``local-cluster[2,1,1024]`` session that starts and runs a few
small queries took 19.1-19.4 s of CPU without it and 12.1-12.4 s with it (bench/RESULTS.md).
It changes how the JVM loads classes, not what they do.

How: one small Spark session (``local-cluster[1,1,1024]``, the work the tests' sessions
do: SQL, Arrow, Python UDFs, a barrier stage, Parquet) runs with
``-XX:DumpLoadedClassList`` on its driver and its executor; ``java -Xshare:dump`` then
writes the classes both loaded into ``<environment>/spark-jvm/spark.jsa``, with the class
path Spark's launcher gave them, and ``java -Xshare:on`` checks that a JVM with that class
path maps it.

Java takes an archive only with the class path it was written for, and refuses one that
holds a directory with files in it: Spark puts ``SPARK_CONF_DIR`` first on every JVM's class
path, so the tests point it at ``<environment>/spark-jvm/conf``, kept empty, and give
Spark its settings with ``--properties-file`` instead (tests/conftest.py: _spark_settings).
When anything here fails, it says why and writes no archive: the tests run without it.

    python scripts/spark_jvm_archive.py
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HERE = os.path.join(sys.prefix, "spark-jvm")
ARCHIVE = os.path.join(HERE, "spark.jsa")
EMPTY_CONF = os.path.join(HERE, "conf")  # SPARK_CONF_DIR of the tests: must stay empty
# what Spark's launcher gives every JVM besides its settings
MODULES = "--add-modules=jdk.incubator.vector"


def jvm_flags() -> list[str]:
    """The flags the tests' JVMs run with: tests/spark-conf/spark-defaults.conf's."""
    with open(os.path.join(ROOT, "tests", "spark-conf", "spark-defaults.conf")) as f:
        return re.search(r"^spark\.driver\.extraJavaOptions\s+(.*)$", f.read(),
                         flags=re.M).group(1).split()

WORKLOAD = r'''
import sys
import pyarrow as pa
from pyspark.sql import SparkSession, functions as F
from pyspark.sql.pandas.functions import pandas_udf

spark = (SparkSession.builder.master("local-cluster[1,1,1024]")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.extraJavaOptions", sys.argv[1])
         .config("spark.executor.extraJavaOptions", sys.argv[2])
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
frame = spark.createDataFrame([(i, float(i), str(i % 3), [float(i)] * 2) for i in range(200)],
                              "id long, x double, k string, v array<double>")
frame.groupBy("k").agg(F.count("*"), F.avg("x")).collect()

@pandas_udf("double")
def twice(x):
    return x * 2

def batches(it):
    for batch in it:
        yield pa.RecordBatch.from_pydict({"n": [batch.num_rows]})

frame.select(twice("x")).collect()
frame.repartition(1).mapInArrow(batches, "n long", barrier=True).collect()  # 1 slot
frame.rdd.map(lambda row: row.id).sum()
path = sys.argv[3]
frame.write.mode("overwrite").parquet(path + "/parquet")
spark.read.parquet(path + "/parquet").orderBy("id").limit(5).toPandas()
frame.write.mode("overwrite").json(path + "/json")
spark.read.json(path + "/json").count()
frame.createOrReplaceTempView("t")
spark.sql("SELECT k, max(x) OVER (PARTITION BY k) FROM t").collect()
spark.stop()
'''


def fail(why: str) -> None:
    print(f"spark_jvm_archive: no archive written ({why}); the tests run without one")
    shutil.rmtree(HERE, ignore_errors=True)
    sys.exit(0)


def main() -> None:
    shutil.rmtree(HERE, ignore_errors=True)
    os.makedirs(EMPTY_CONF)
    flags = jvm_flags()
    with tempfile.TemporaryDirectory(prefix="sparktf-jvm-archive-") as work:
        lists = [os.path.join(work, f"{role}.classlist") for role in ("driver", "executor")]
        options = [" ".join([*flags, f"-XX:DumpLoadedClassList={path}"]) for path in lists]
        env = {**os.environ, "SPARK_CONF_DIR": EMPTY_CONF, "SPARK_PRINT_LAUNCH_COMMAND": "1"}
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        env["PYSPARK_PYTHON"] = sys.executable  # the executor's Python workers: this one
        try:
            ran = subprocess.run([sys.executable, "-c", WORKLOAD, *options, work], env=env,
                                 capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            fail("the Spark session did not end in 300 s")
        if ran.returncode != 0:
            fail(f"the Spark session failed:\n{ran.stdout[-2000:]}{ran.stderr[-6000:]}")
        launch = re.search(r"Spark Command: (\S+) -cp (\S+)", ran.stderr)
        if not launch or not all(os.path.exists(path) for path in lists):
            fail("the driver's launch command or a class list is missing")
        java, class_path = launch.groups()
        names = set()
        for path in lists:
            with open(path) as f:
                # plain class names; the lambda-proxy and other @ lines need their context
                names.update(line.split()[0] for line in f
                             if line.strip() and not line.startswith(("#", "@")))
        merged = os.path.join(work, "merged.classlist")
        with open(merged, "w") as f:
            f.write("\n".join(sorted(names)) + "\n")
        dumped = subprocess.run(
            [java, "-Xshare:dump", f"-XX:SharedClassListFile={merged}",
             f"-XX:SharedArchiveFile={ARCHIVE}", *flags, MODULES, "-cp", class_path],
            capture_output=True, text=True, timeout=600)
        if dumped.returncode != 0 or not os.path.exists(ARCHIVE):
            fail(f"java -Xshare:dump failed:\n{dumped.stdout[-2000:]}{dumped.stderr[-2000:]}")
        # a JVM with Spark's class path must map it (-Xshare:on fails where auto would not)
        check = subprocess.run(
            [java, "-Xshare:on", f"-XX:SharedArchiveFile={ARCHIVE}", *flags, MODULES,
             "-cp", class_path, "-version"],
            capture_output=True, text=True, timeout=120)
        if check.returncode != 0:
            fail(f"a JVM refused the archive:\n{check.stdout[-2000:]}{check.stderr[-2000:]}")
    jars = len(glob.glob(os.path.join(os.path.dirname(class_path.split(":")[-1]), "*.jar")))
    print(f"spark_jvm_archive: {len(names)} classes of {jars} jars in {ARCHIVE} "
          f"({os.path.getsize(ARCHIVE) // 2**20} MB)")


if __name__ == "__main__":
    main()
