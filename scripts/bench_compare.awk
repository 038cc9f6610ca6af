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
  if (run == 2 && !(key in seen)) { seen[key] = 1; order[++n] = key }
}
END {
  last = ""
  for (i = 1; i <= n; i++) {
    split(order[i], k, SUBSEP)
    if (!((1, order[i]) in med)) continue
    if (k[1] != last) {
      printf "\n### %s\n\n", k[1]
      printf "| contender | before (%s) | after (%s) | after / before | ratio to first, before | ratio to first, after |\n", unit[k[1]], unit[k[1]]
      print "|---|---:|---:|---:|---:|---:|"
      last = k[1]
    }
    b = med[1, order[i]]; a = med[2, order[i]]
    printf "| %s | %.1f | %.1f | %.2f× | %.2f× | %.2f× |\n", k[2], b, a, (b > 0 ? a / b : 0),
      b / first[1, k[1]], a / first[2, k[1]]
  }
}
