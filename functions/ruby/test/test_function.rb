# frozen_string_literal: true

# Tests of the Ruby SDK: the helpers, and real processes of sample functions in exec and warm
# mode. Ruby's standard library and its bundled minitest only:
#
#   ruby -I functions/ruby/lib functions/ruby/test/test_function.rb

require "minitest/autorun"
require "json"
require "open3"
require "rbconfig"
require "tmpdir"

ROOT = File.expand_path("..", __dir__) # functions/ruby
LIB = File.join(ROOT, "lib")
$LOAD_PATH.unshift(LIB)
require "workdo/function"

KINDS = File.join(ROOT, "examples", "sdk_kinds.rb")
ROBOT = File.join(ROOT, "examples", "lyber_robot.rb")

module Support
  def event(obj: "druid:bb123cd4567", call: nil, **props)
    e = {
      "protocol" => "workdo/1", "step_id" => 4711, "workflow_id" => 815, "object" => obj,
      "template" => "sdkWF", "step" => "run", "version" => 1, "lane" => "default",
      "attempt" => 2, "max_attempts" => 5,
      "properties" => props.each_with_object({}) { |(k, v), h| h[k.to_s] = v },
      "documents" => { "descMetadata" => "<mods/>" }, "context" => { "batch" => "2026-11" },
      "deadline" => "2099-11-22T04:31:07.120Z", "novel_field" => [1, 2]
    }
    e["call"] = call unless call.nil?
    e
  end

  def ruby_cmd(script)
    [RbConfig.ruby, "-I", LIB, script]
  end

  # One exec call: the result, stderr, exit status. Fails unless stdout is one result line.
  def run_exec(script, ev, env = {})
    data = ev.is_a?(String) ? ev : JSON.generate(ev)
    out, err, st = Open3.capture3({ "WORKDO_MODE" => "exec" }.merge(env), *ruby_cmd(script), stdin_data: data)
    lines = out.lines
    assert_equal 1, lines.size, "stdout is not one result line: #{out.inspect} (stderr #{err.inspect})"
    [JSON.parse(lines[0]), err, st.exitstatus]
  end

  # A warm process fed all lines at once (as a pipelining runtime would), then its stdin closed:
  # its answers in the order written, stderr, exit status, seconds taken.
  def run_warm(script, lines, env = {})
    data = lines.map { |l| (l.is_a?(String) ? l : JSON.generate(l)) + "\n" }.join
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    out, err, st = Open3.capture3({ "WORKDO_MODE" => "warm" }.merge(env), *ruby_cmd(script), stdin_data: data)
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    [out.lines.map { |l| JSON.parse(l) }, err, st.exitstatus, took]
  end
end

class HelpersTest < Minitest::Test
  include Support
  F = Workdo::Function

  def test_results_have_the_protocols_shape
    assert_equal(
      { "status" => "completed", "note" => "ok", "lifecycle" => "described",
        "object" => { "properties" => { "pages" => 12, "old" => nil }, "documents" => { "descMetadata" => "<mods/>" } },
        "context" => { "k" => "v" },
        "start" => [{ "template" => "accessionWF" }, { "template" => "nextWF", "priority" => 5 }] },
      F.completed(note: "ok", properties: { pages: 12, "old" => nil }, documents: { "descMetadata" => "<mods/>" },
                  context: { k: "v" }, start: ["accessionWF", { template: "nextWF", priority: 5 }],
                  lifecycle: "described").to_h
    )
    assert_equal({ "status" => "completed" }, F.completed.to_h)
    assert_equal({ "status" => "error", "message" => "down", "retryable" => true }, F.failed("down").to_h)
    assert_equal({ "status" => "error", "message" => "bad", "text" => "t", "retryable" => false },
                 F.failed("bad", retry: false, text: "t").to_h)
    assert_equal({ "status" => "error", "message" => "bad", "retryable" => false }, F.error("bad", retryable: false).to_h)
    assert_equal({ "status" => "defer", "note" => "scan", "seconds" => 600.0 }, F.defer(seconds: 600, note: "scan").to_h)
    assert_equal({ "status" => "defer", "until" => "2026-12-01T09:00:00Z" }, F.defer(until: "2026-12-01T09:00:00Z").to_h)
    assert_equal "2026-12-01T09:00:00.000Z", F.defer(until: Time.utc(2026, 12, 1, 9)).to_h["until"]
    [{}, { seconds: 1, until: "x" }, { seconds: -1 }, { seconds: Float::NAN }, { when: 1 }].each do |bad|
      assert_raises(ArgumentError, bad.inspect) { F.defer(**bad) }
    end
    assert_equal({ "status" => "skipped", "note" => "none" }, F.skipped(note: "none").to_h)
    assert_equal({ "status" => "IN PROCESS", "note" => "sent" }, F.intermediate("IN PROCESS", note: "sent").to_h)
  end

  def test_the_event_carries_every_field_and_keeps_unknown_ones
    e = F::Event.new(event(call: "c-1", title: "Walden"))
    assert_equal ["workdo/1", 4711, 815, "druid:bb123cd4567", "sdkWF", "run", 1, "default"],
                 [e.protocol, e.step_id, e.workflow_id, e.object, e.template, e.step, e.version, e.lane]
    assert_equal [2, 5, "c-1", nil, nil], [e.attempt, e.max_attempts, e.call, e.traceparent, e.fragment]
    assert_equal({ "title" => "Walden" }, e.properties)
    assert_equal({ "descMetadata" => "<mods/>" }, e.documents)
    assert_equal({ "batch" => "2026-11" }, e.context)
    assert_equal [1, 2], e.raw["novel_field"]
    assert_equal "bb123cd4567", e.bare_object
    assert_operator e.seconds_left, :>, 0
    assert_equal({}, F::Event.new("object" => "obj:x").properties)
  end

  def test_answer_copies_call_and_turns_everything_into_a_result
    none = ->(_e) {}
    assert_equal({ "status" => "completed", "call" => "c1" }, F.answer(none, event(call: "c1")))
    assert_equal({ "status" => "completed" }, F.answer(none, event))
    assert_equal({ "status" => "IN PROCESS", "call" => "c2" },
                 F.answer(->(_e) { { status: "IN PROCESS", call: "forged" } }, event(call: "c2")))
    bad = F.answer(->(_e) { 42 }, event(call: "c3"))
    assert_equal ["error", "c3", false], bad.values_at("status", "call", "retryable")
    assert_match(/returned Integer/, bad["message"])
    assert_equal({ "status" => "error", "message" => "no title", "retryable" => false, "call" => "c4" },
                 F.answer(->(_e) { raise F::Failure.new("no title", retry: false) }, event(call: "c4")))
    broken = event(call: "c5")
    broken["attempt"] = "two"
    r = F.answer(none, broken)
    assert_equal ["error", "c5", false], r.values_at("status", "call", "retryable")
    assert_match(/attempt/, r["message"])
    assert_match(/exit\(3\)/, F.answer(->(_e) { exit 3 }, event)["message"])
    traced = lambda do |_e|
      F.span("download", pages: 12) { nil }
      F.completed
    end
    spans = F.answer(traced, event)["spans"]
    assert_equal [["download", { "pages" => "12" }]], spans.map { |s| [s["name"], s["attributes"]] }
  end

  def test_an_exception_is_a_bounded_error_with_its_backtrace
    deep = lambda do |n|
      raise KeyError, "x" * 10_000 if n.zero?

      deep.call(n - 1)
    end
    r = F.answer(->(_e) { deep.call(20) }, event(call: "c"))
    assert_equal ["error", true, "c"], r.values_at("status", "retryable", "call")
    assert r["message"].start_with?("KeyError: xxx"), r["message"][0, 50]
    assert_operator r["message"].bytesize, :<=, F::MAX_MESSAGE_BYTES
    assert_match(/Backtrace \(first 5 of \d+\)/, r["message"])
    refute_match(/runner\.rb/, r["message"], "the SDK's own frames are left out")
    assert_match(/test_function\.rb/, r["text"])
    assert_operator r["text"].bytesize, :<=, F::MAX_TEXT_BYTES
  end

  def test_encode_keeps_every_answer_within_the_protocol
    d = JSON.parse(F.encode({ "status" => "error", "message" => "é" * 5000 + "\0", "note" => "n\0", "call" => "c" }))
    assert_operator d["message"].bytesize, :<=, F::MAX_MESSAGE_BYTES
    assert_equal "n\\0", d["note"]
    [
      [{ "status" => "completed", "object" => { "properties" => { "k" => "a\0b" } } }, "NUL"],
      [{ "status" => "completed", "object" => { "properties" => { "k" => Float::NAN } } }, "JSON"],
      [{ "status" => "completed", "object" => { "properties" => { "k" => "\xff".b } } }, "JSON"],
      [{ "status" => "completed", "object" => { "documents" => { "big" => "x" * F::MAX_RESULT_BYTES } } }, "over the limit"]
    ].each do |bad, what|
      d = JSON.parse(F.encode(bad.merge("call" => "c9")))
      assert_equal ["error", "c9", false], d.values_at("status", "call", "retryable"), bad.inspect[0, 100]
      assert_includes d["message"], what
    end
    refute_includes F.encode({ "status" => "completed", "note" => "two\nlines" }), "\n"
  end
end

class ExecTest < Minitest::Test
  include Support

  def test_each_kind_of_result
    {
      "completed" => { "status" => "completed", "note" => "answered completed for druid:bb123cd4567",
                       "object" => { "properties" => { "answered_for" => "druid:bb123cd4567", "attempt" => 2 } } },
      "failed" => { "status" => "error", "message" => "failed as asked on attempt 2", "retryable" => true },
      "failed_final" => { "status" => "error", "message" => "failed for good as asked", "retryable" => false },
      "defer" => { "status" => "defer", "note" => "not ready, as asked", "seconds" => 3600.0 },
      "skipped" => { "status" => "skipped", "note" => "skipped as asked" }
    }.each do |want, expected|
      r, err, st = run_exec(KINDS, event(want: want))
      assert_equal expected, r, want
      assert_equal 0, st, err
    end
    assert_equal 0.3, run_exec(KINDS, event(want: "defer", defer_seconds: 0.3))[0]["seconds"]
  end

  def test_an_exception_is_an_error_result
    r, _, st = run_exec(KINDS, event(want: "raise"))
    assert_equal 0, st
    assert_equal %w[error], [r["status"]]
    assert_equal true, r["retryable"]
    assert r["message"].start_with?("ArgumentError: asked to raise for druid:bb123cd4567\nBacktrace:"), r["message"]
    assert_match(/in `boom'/, r["message"])
    assert_match(/sdk_kinds\.rb:\d+/, r["text"])
    refute r.key?("call")
  end

  def test_puts_goes_to_stderr
    r, err, = run_exec(KINDS, event(want: "print"))
    assert_equal "completed", r["status"]
    ["puts from the function", "print too", "STDOUT.write", "a subprocess's stdout"].each { |s| assert_includes err, s }
  end

  def test_input_that_is_not_an_event
    ["{not json", "[1, 2]", ""].each do |data|
      r, _, st = run_exec(KINDS, data)
      assert_equal ["error", false, 0], [r["status"], r["retryable"], st], data
    end
  end

  def test_a_failing_script_reports_its_own_error_and_serves_nothing
    Dir.mktmpdir do |d|
      script = File.join(d, "broken.rb")
      File.write(script, <<~RUBY)
        require "workdo/function"
        Workdo::Function.step { |_e| nil }
        raise "the script itself is broken"
      RUBY
      out, err, st = Open3.capture3(*ruby_cmd(script), stdin_data: JSON.generate(event))
      assert_equal "", out
      assert_includes err, "the script itself is broken"
      refute_equal 0, st.exitstatus
    end
  end
end

class WarmTest < Minitest::Test
  include Support

  def test_every_line_is_answered_with_its_call
    wants = %w[completed failed failed_final defer skipped raise print completed]
    lines = wants.each_with_index.map { |w, i| event(obj: "obj:w#{i}", call: "call-#{i}", want: w) }
    answers, err, st, = run_warm(KINDS, lines)
    assert_equal 0, st, err
    assert_equal wants.size, answers.size
    by_call = answers.to_h { |a| [a["call"], a] }
    assert_equal wants.each_index.map { |i| "call-#{i}" }.sort, by_call.keys.sort
    wants.each_with_index do |w, i|
      a = by_call["call-#{i}"]
      status = { "failed" => "error", "failed_final" => "error", "raise" => "error", "print" => "completed" }.fetch(w, w)
      assert_equal status, a["status"], a.inspect
      assert_equal({ "answered_for" => "obj:w#{i}", "attempt" => 2 }, a["object"]["properties"]) if status == "completed"
    end
    assert_includes err, "puts from the function"
    assert_equal 3600.0, by_call["call-3"]["seconds"]
  end

  def test_a_thread_safe_function_answers_pipelined_calls_out_of_order
    sleeps = [800, 600, 400, 200]
    lines = sleeps.each_with_index.map { |ms, i| event(obj: "obj:p#{i}", call: "p#{i}", sleep_ms: ms) }
    answers, err, st, took = run_warm(KINDS, lines)
    assert_equal 0, st, err
    assert_equal %w[p3 p2 p1 p0], answers.map { |a| a["call"] }
    answers.each { |a| assert_equal "obj:#{a["call"]}", a["object"]["properties"]["answered_for"] }
    assert_operator took, :<, sleeps.sum / 1000.0, "the calls ran one after another"
  end

  def test_a_function_not_declared_thread_safe_answers_in_order
    Dir.mktmpdir do |d|
      script = File.join(d, "serial.rb")
      File.write(script, <<~RUBY)
        require "workdo/function"
        Workdo::Function.step do |event|
          sleep(event.properties["sleep_ms"] / 1000.0)
          Workdo::Function.completed(note: event.object)
        end
      RUBY
      lines = [300, 100, 0].each_with_index.map { |ms, i| event(obj: "obj:s#{i}", call: "s#{i}", sleep_ms: ms) }
      answers, err, st, = run_warm(script, lines)
      assert_equal 0, st, err
      assert_equal [%w[s0 obj:s0], %w[s1 obj:s1], %w[s2 obj:s2]], answers.map { |a| [a["call"], a["note"]] }
    end
  end

  def test_an_event_of_the_wrong_shape_is_answered_and_the_process_goes_on
    broken = event(call: "bad-1")
    broken["properties"] = "not an object"
    answers, err, st, = run_warm(KINDS, [broken, event(call: "ok-2")])
    assert_equal 0, st, err
    # Answers come as calls finish, not in the order they were given: compared by call.
    assert_equal [%w[bad-1 error], %w[ok-2 completed]], answers.map { |a| [a["call"], a["status"]] }.sort
    assert_equal false, answers.find { |a| a["call"] == "bad-1" }["retryable"]
  end

  def test_a_line_naming_no_call_ends_the_process_after_the_calls_in_hand
    answers, err, st, = run_warm(KINDS, [event(call: "a", sleep_ms: 300), "this is not json", event(call: "never")])
    assert_equal 2, st
    assert_equal ["a"], answers.map { |a| a["call"] }
    assert_includes err, "cannot answer an input line"
    answers, err, st, = run_warm(KINDS, [event])
    assert_equal [[], 2], [answers, st]
    assert_includes err, 'no String "call"'
  end

  def test_blank_lines_are_ignored
    answers, err, st, = run_warm(KINDS, ["", "   ", event(call: "x")])
    assert_equal [0, ["x"]], [st, answers.map { |a| a["call"] }], err
  end
end

class JobTest < Minitest::Test
  include Support

  def test_a_lyber_core_robot_runs_warm_with_its_return_states
    objs = %w[bb1 skip1 noop1 io1 bad1 plain1]
    answers, err, st, = run_warm(ROBOT, objs.map { |o| event(obj: "druid:#{o}", call: o) })
    assert_equal 0, st, err
    by = answers.to_h { |a| [a["call"], a] }
    assert_equal({ "status" => "completed", "note" => "shelved bb1", "call" => "bb1" }, by["bb1"])
    assert_equal({ "status" => "skipped", "note" => "nothing to shelve", "call" => "skip1" }, by["skip1"])
    assert_equal({ "status" => "noop", "note" => "shelving handed to another service", "call" => "noop1" }, by["noop1"])
    assert_equal({ "status" => "completed", "call" => "plain1" }, by["plain1"])
    # lyber-core retries only its retriable_exceptions (IOError here); others go to error.
    assert_equal ["error", true], by["io1"].values_at("status", "retryable")
    assert_match(/\AIOError: the stacks are not mounted/, by["io1"]["message"])
    assert_equal ["error", false], by["bad1"].values_at("status", "retryable")
    assert_match(/no content metadata for druid:bad1/, by["bad1"]["message"])
    assert_includes err, "shelving druid:bb1"
    assert_includes err, "a robot's puts goes to stderr"
  end

  def test_a_sidekiq_style_job_gets_perform_druid
    Dir.mktmpdir do |d|
      script = File.join(d, "job.rb")
      File.write(script, <<~RUBY)
        require "workdo/function"
        class PublishJob
          attr_accessor :jid
          def perform(druid)
            raise "no druid" unless druid.start_with?("druid:")
            puts "published \#{druid} as job \#{jid} (\#{workdo_event.step})"
            Workdo::Function.completed(note: "published \#{druid}", properties: { "published" => true })
          end
        end
        class QuietJob
          def perform(druid); end
        end
        Workdo::Function.run_job(ARGV[0] == "quiet" ? QuietJob : PublishJob)
      RUBY
      answers, err, st, = run_warm(script, [event(call: "j1"), event(obj: "obj:x", call: "j2")])
      assert_equal 0, st, err
      by = answers.to_h { |a| [a["call"], a] }
      assert_equal({ "status" => "completed", "note" => "published druid:bb123cd4567",
                     "object" => { "properties" => { "published" => true } }, "call" => "j1" }, by["j1"])
      assert_equal "error", by["j2"]["status"]
      assert_includes err, "published druid:bb123cd4567 as job j1 (run)"
      out, err, = Open3.capture3({ "WORKDO_MODE" => "exec" }, *ruby_cmd(script), "quiet", stdin_data: JSON.generate(event))
      assert_equal({ "status" => "completed" }, JSON.parse(out), err)
    end
  end

  def test_an_adapter_answers_in_process_too
    klass = Class.new do
      def perform_work
        Struct.new(:status, :note).new("unheard-of", "?")
      end
    end
    r = Workdo::Function.answer(Workdo::Function.job(klass), event(call: "k"))
    assert_equal ["error", false, "k"], r.values_at("status", "retryable", "call")
    assert_match(/unheard-of/, r["message"])
    assert_equal({ "status" => "waiting for DOR", "call" => "k2" },
                 Workdo::Function.answer(
                   Workdo::Function.job(Class.new { define_method(:perform_work) { Struct.new(:status).new("noop") } },
                                        noop_status: "waiting for DOR"),
                   event(call: "k2")
                 ))
  end
end

class GemTest < Minitest::Test
  def test_the_gemspec_builds
    gem = File.join(RbConfig::CONFIG["bindir"], "gem")
    skip "no gem command" unless File.executable?(gem)
    Dir.mktmpdir do |d|
      out, err, st = Open3.capture3(gem, "build", File.join(ROOT, "workdo-function.gemspec"), "--output", File.join(d, "w.gem"), chdir: ROOT)
      assert st.success?, out + err
      list, = Open3.capture3("tar", "-xOf", File.join(d, "w.gem"), "data.tar.gz")
      files, = Open3.capture3("tar", "-tz", stdin_data: list, binmode: true)
      %w[lib/workdo/function.rb lib/workdo/function/runner.rb lib/workdo/function/job.rb README.md].each do |f|
        assert_includes files.lines.map(&:chomp), f
      end
    end
  end
end
