"""Whether Spark's StandardScaler depends on the order its partitions' summaries are merged
(a multi-executor run merges them as their tasks finish): the digits training rows in two
partitions, then the same two partitions swapped, on local[1] (tasks finish in order).

    .venv/bin/python bench/scaler_merge_order.py
"""
import numpy as np
from pyspark.ml import Pipeline
from pyspark.ml.feature import StandardScaler, VectorAssembler
from pyspark.sql import SparkSession
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled","false").getOrCreate()
X, y = load_digits(return_X_y=True)
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
pixels = [f"p{i}" for i in range(64)]
schema = ", ".join(f"{c} double" for c in pixels) + ", label long"
rows = [[*map(float, x), int(t)] for x, t in zip(Xtr, ytr)]
h = len(rows)//2
d1 = spark.sparkContext.parallelize(rows, 2)
d2 = spark.sparkContext.parallelize(rows[h:] + rows[:h], 2)
stds = []
for d in (d1, d2):
    df = spark.createDataFrame(d, schema)
    m = Pipeline(stages=[VectorAssembler(inputCols=pixels, outputCol="raw"),
                         StandardScaler(inputCol="raw", outputCol="features")]).fit(df)
    stds.append(m.stages[1].std.toArray())
print("std differ at", int((stds[0] != stds[1]).sum()), "of 64; max rel",
      float(np.max(np.abs(stds[0]-stds[1])/np.where(stds[0]==0,1,stds[0]))))
