#!/usr/bin/env bash
# Fetch Apache Kafka's jars (broker, CLI tools, Java client) and Spark's JVM Kafka connector
# with Maven, once: Maven caches them in ~/.m2, and this copies them into
#   var/kafka-jars/kafka/        one classpath for kafka.Kafka, the tools and the client
#   var/kafka-jars/spark-kafka/  the connector's jars that pyspark lacks, for spark.jars
# Each folder has a .stamp naming what it holds; a folder whose stamp matches is kept, so a
# second run does nothing. Maven is tried offline first (from ~/.m2), then from Maven Central.
# On failure the reason goes to stderr and to var/kafka-jars/ERROR, which the tests in
# tests/kafka report (they fail, never skip). Exit status: 0 when both folders are ready.
set -uo pipefail
cd "$(dirname "$0")/.."
root=var/kafka-jars
mkdir -p "$root"
rm -f "$root/ERROR"

fail() {
    echo "kafka_jars: $*" >&2
    echo "$*" >>"$root/ERROR"
    status=1
}

status=0
if ! command -v mvn >/dev/null 2>&1; then
    fail "Maven (mvn) is not installed: run scripts/setup.sh, or apt-get install maven"
    exit 1
fi

# fetch POM OUT_DIR STAMP [MAVEN_ARGS...]: copy POM's runtime dependencies into OUT_DIR
fetch() {
    local pom=$1 out=$2 stamp=$3
    shift 3
    if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
        return 0
    fi
    local tmp="$out.tmp" log="$root/mvn.log"
    rm -rf "$tmp"
    local args=(-B -q -f "$pom" dependency:copy-dependencies -DincludeScope=runtime
        -DoutputDirectory="$PWD/$tmp" "$@")
    if ! mvn -o "${args[@]}" >"$log" 2>&1 && ! mvn "${args[@]}" >"$log" 2>&1; then
        rm -rf "$tmp"
        return 1
    fi
    echo "$stamp" >"$tmp/.stamp"
    rm -rf "$out"
    mv "$tmp" "$out"
}

kafka_pom=tests/kafka/pom.xml
kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$kafka_pom")
if fetch "$kafka_pom" "$root/kafka" "kafka $kafka_version $(sha256sum "$kafka_pom" | cut -c1-16)"; then
    echo "kafka_jars: Apache Kafka $kafka_version in $root/kafka"
else
    fail "could not fetch Apache Kafka $kafka_version's jars with Maven (no network, or Maven" \
        "Central unreachable?); Maven said: $(grep -m3 -E 'ERROR|Could not' "$root/mvn.log" | tr '\n' ' ')"
fi

# Spark's connector at the installed pyspark's version; Maven Central may not have that
# version yet, and then the pom's own (the newest it had when last checked) stands in.
spark_pom=tests/kafka/spark-pom.xml
spark_default=$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$spark_pom")
pyspark_version=$(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null || true)
spark_hash=$(sha256sum "$spark_pom" | cut -c1-16)
spark_version=""
for candidate in $pyspark_version $spark_default; do
    if fetch "$spark_pom" "$root/spark-kafka" "spark-sql-kafka $candidate $spark_hash" \
        -Dspark.version="$candidate"; then
        spark_version=$candidate
        break
    fi
done
if [ -n "$spark_version" ]; then
    note=""
    if [ -n "$pyspark_version" ] && [ "$spark_version" != "$pyspark_version" ]; then
        note=" (pyspark is $pyspark_version: Maven Central has no connector of that version)"
    fi
    echo "kafka_jars: Spark's Kafka connector $spark_version in $root/spark-kafka$note"
else
    fail "could not fetch Spark's Kafka connector (spark-sql-kafka-0-10_2.13" \
        "${pyspark_version:-$spark_default}) with Maven (no network?)"
fi
exit "$status"
