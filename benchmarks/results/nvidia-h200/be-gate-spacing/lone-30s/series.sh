gpu=$1; prog=$2; D=/tmp/beo/gpu$gpu; mkdir -p $D
for rep in 0 1; do for q in plain none 25 100 1000; do
  out=$D/$prog-$q-$rep.csv
  if [ $q = plain ]; then
    CUDA_VISIBLE_DEVICES=$gpu timeout 120 python3 examples/programs/$prog --duration 30 --out $out > $D/$prog-$q-$rep.log 2>&1
  else
    S=$D/state-$q-$rep
    SP=""; [ $q != none ] && SP="--be-gate-spacing-us $q"
    python3 -m orion_cli.app up --gpu $gpu --state-dir $S --queue-limit-us 1 $SP > $D/up-$q-$rep.log 2>&1
    timeout 120 python3 -m orion_cli.app run --be --gpu $gpu --state-dir $S --name be -- python3 examples/programs/$prog --duration 30 --out $out > $D/$prog-$q-$rep.log 2>&1
    python3 -m orion_cli.app status --gpu $gpu --state-dir $S --json > $D/status-$q-$rep.json 2>&1
    python3 -m orion_cli.app down --gpu $gpu --state-dir $S >> $D/up-$q-$rep.log 2>&1
  fi
  echo "$(date +%s) $gpu $prog $q $rep done" >> /tmp/beo/progress.txt
done; done
