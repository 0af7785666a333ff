# Checks of an eccl-tune table and report, sourced by tune_roundtrip.sh and
# sim/tune_sim.sh (POSIX sh).

# tune_rules_name_ppn TABLE PPN: every rule ends in ppn=PPN, and there is an
# all-reduce rule.
tune_rules_name_ppn() {
    if grep -v '^#' "$1" | grep -qv " ppn=$2\$"; then echo "a rule without ppn=$2:"; cat "$1"; return 1; fi
    grep -q "^allreduce 1-4294967295 .* ppn=$2\$" "$1" || { echo "no all-reduce rule:"; cat "$1"; return 1; }
}

# tune_measured REPORT NP ALGO: the all-reduce time table at NP has a
# column ALGO holding a measurement (data rows lack the header's leading
# '#': column i of the header is field i - 1 there).
tune_measured() {
    awk -v head="^# allreduce np $2: time" -v algo="$3" '
        $0 ~ head { t = 1; next }
        t && /^# +bytes/ { for (i = 1; i <= NF; i++) if ($i == algo) col = i - 1; next }
        t && /^# / { exit }
        t && col && $col + 0 > 0 { found = 1 } END { exit !found }' "$1" ||
        { echo "$3 not measured:"; cat "$1"; return 1; }
}
