#!/usr/bin/env bash
# The layout's rules that import contracts cannot state (issue 46): each check lists what breaks
# its rule and must list nothing. Run from a checkout's root: bash .ci/rooms.sh
set -uo pipefail
cd "$(dirname "$0")/.."
failed=0

check() {  # check "RULE" COMMAND...: the command's output is what breaks the rule
    local rule=$1 found
    shift
    found=$("$@" 2>/dev/null)
    if [ -n "$found" ]; then
        printf 'BROKEN: %s\n%s\n' "$rule" "$found"
        failed=1
    else
        printf 'kept: %s\n' "$rule"
    fi
}

outside_cluster() { grep -rlE "client\.(map|submit|scatter|gather|run)|current_client\(" jobs --include=*.py | grep -v '^jobs/cluster/'; }
commands_outside_cli() { grep -rlE "@click\.|@[a-z_]+\.command\(" jobs --include=*.py | grep -v '^jobs/cli/'; }
pq_outside_codec() { grep -rlE "PQCodec|pq_codec|codebook" storage pipeline/classify pipeline/coded_rows.py --include=*.py | grep -v '^storage/row_codecs.py'; }
paper_benchmarks_in_package() { ls bench | grep -E 'natural|cifar10|bow_fisher|ale_ceiling|rare_local|protocols|accuracy'; }
second_lmgist() { grep -rl "def reference_gist" bench reproductions tests --include=*.py | grep -v '^bench/lmgist.py'; }
second_models_module() { git ls-files '*.py' | grep '/models\.py$' | sed 1d; }

check "only jobs/cluster/ touches a dask Client" outside_cluster
check "nothing in pipeline/ names distributed" grep -rlw distributed pipeline --include=*.py
check "commands are defined in jobs/cli/ alone" commands_outside_cli
check "the command line opens no cluster: its use cases do" grep -rnE "connect\(|store_on_cluster\(|model_on_cluster\(" jobs/cli --include=*.py
check "PQ is known only to its package and the codec registry" pq_outside_codec
check "classifiers take a codec object, not its arrays" grep -rnE "(partial_)?fit_codes|update_codes|add_class_codes" pipeline jobs storage --include=*.py
check "jobs do not branch on a store's encoding" grep -rnE "encoding (==|!=)" jobs --include=*.py
check "the papers' reproductions are not in the shipped bench package" paper_benchmarks_in_package
check "the product imports no reproduction" grep -rlE "(import|from) imgscale_reproductions" bench jobs pipeline storage imgscale --include=*.py
check "one LMgist reference" second_lmgist
check "one models.py" second_models_module
check "storage defines no ingest use case: jobs/ingest/ does" grep -rnE "(def|class) [Ii]ngest" storage --include=*.py
exit $failed
