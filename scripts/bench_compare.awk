#!/usr/bin/awk -f
# Before/after tables from two DEFERLOOP_BENCH_RESULTS files (baseline first):
# every table whose title is in both, every contender in both, with its median
# in each run and its ratio to the table's first contender in each run. Used by
# scripts/bench_report.sh; prints markdown, computes every figure it prints.
BEGIN { FS = "\t" }
FNR == 1 { run++ }
$1 == "value" {
  key = $2 SUBSEP $3
  med[run, key] = $6
  unit[$2] = $4
  if (!((run, $2) in first)) first[run, $2] = $6
  if (run == 2) {
    if (!($2 in has)) { has[$2] = 1; sections[++ns] = $2 }
    if (!(key in seen)) { seen[key] = 1; names[$2, ++count[$2]] = $3 }
  }
}
END {
  for (i = 1; i <= ns; i++) {
    t = sections[i]
    if (!((1, t) in first)) continue
    printf "\n### %s\n\n", t
    printf "| contender | before (%s) | after (%s) | after / before | ratio to first, before | ratio to first, after |\n", unit[t], unit[t]
    print "|---|---:|---:|---:|---:|---:|"
    for (j = 1; j <= count[t]; j++) {
      key = t SUBSEP names[t, j]
      if (!((1, key) in med)) continue
      b = med[1, key]; a = med[2, key]
      printf "| %s | %.1f | %.1f | %.2f× | %.2f× | %.2f× |\n", names[t, j], b, a, (b > 0 ? a / b : 0),
        b / first[1, t], a / first[2, t]
    }
  }
}
