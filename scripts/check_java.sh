#!/usr/bin/env bash
# Checks that a Java 17+ runtime is on PATH (or under JAVA_HOME): PySpark 4 needs it.
set -u
java_bin="java"
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java_bin="$JAVA_HOME/bin/java"; fi
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "sparktf: Java was not found. PySpark 4 needs Java 17 or newer." >&2
  echo "  Install it (Debian/Ubuntu: 'sudo apt-get install openjdk-17-jre-headless') or set JAVA_HOME." >&2
  exit 1
fi
version=$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${version%%.*}
if [ "$major" = "1" ]; then major=$(echo "$version" | cut -d. -f2); fi
if ! [ "$major" -ge 17 ] 2>/dev/null; then
  echo "sparktf: found Java '$version' at $(command -v "$java_bin"), but PySpark 4 needs Java 17 or newer." >&2
  echo "  Install Java 17 (Debian/Ubuntu: 'sudo apt-get install openjdk-17-jre-headless') and put it first on PATH or set JAVA_HOME." >&2
  exit 1
fi
