# frozen_string_literal: true

require "json"

module Workdo
  module Function
    # Pipelined calls run at once by a thread-safe function that does not say how many.
    DEFAULT_WORKERS = 4
    # Backtrace lines kept in an error's message (the whole backtrace goes in text).
    MESSAGE_FRAMES = 5
    # Exit status of a warm process that read a line it cannot answer (see Runner#serve_warm).
    EXIT_BAD_INPUT = 2

    SDK_DIR = File.expand_path("..", __dir__) + File::SEPARATOR

    class << self
      # Declare the block the step function of its script:
      #
      #   Workdo::Function.step(thread_safe: true, workers: 4) { |event| completed(note: "ok") }
      #
      # In the script run as the program ($0) it serves the protocol when the script has been
      # read to its end (at_exit), so what the block uses may be defined below it. Required from
      # elsewhere (a test), it only returns the handler, to call with Workdo::Function.answer.
      def step(thread_safe: false, workers: nil, &block)
        raise ArgumentError, "step needs a block" unless block

        handler = Handler.new(block, thread_safe: thread_safe, workers: workers)
        from = caller_locations(1, 1).first
        if from && File.expand_path(from.absolute_path || from.path) == File.expand_path($PROGRAM_NAME)
          at_exit do
            # Not when the script itself failed: its error is what the process reports.
            next if $! && !($!.is_a?(SystemExit) && $!.success?)

            run(handler)
          end
        end
        handler
      end

      # Serve fn (a block, a Handler, or anything answering call(event)) in the mode the runtime
      # asks (WORKDO_MODE: warm, else exec) and exit.
      #
      # From here on the process's stdout belongs to the protocol: puts, print and anything else
      # writing to file descriptor 1 (subprocesses, C extensions) goes to stderr, and stdin reads
      # /dev/null, so a subprocess cannot swallow the next event.
      def run(fn = nil, thread_safe: nil, workers: nil, &block)
        handler = Handler.wrap(fn || block, thread_safe: thread_safe, workers: workers)
        exit(Runner.new(handler).serve)
      end

      # What the SDK answers for event (a Hash or an Event): the result as a JSON-ready Hash, call
      # copied back. Never raises: whatever goes wrong is an error result.
      def answer(fn, event)
        Handler.wrap(fn).answer(event)
      end

      # The answer line for result Hash h (without its newline), made safe to send: note, message
      # and text cut to the runtime's limits and a NUL in them written \0; a NUL elsewhere, a
      # value JSON cannot carry (NaN, text that is not UTF-8) or a result over 1 MiB becomes an
      # error result saying so, for the same call. So an answer never breaks the protocol (which
      # would cost the warm process and every call in flight on it).
      def encode(h)
        call = h["call"].is_a?(String) ? h["call"] : nil
        h = h.dup
        { "note" => MAX_NOTE_BYTES, "message" => MAX_MESSAGE_BYTES, "text" => MAX_TEXT_BYTES }.each do |field, limit|
          v = h[field]
          h[field] = Function.short(utf8(v).gsub("\0") { "\\0" }, limit) if v.is_a?(String)
        end
        %w[status lifecycle until signal object context start].each do |field|
          next unless nul_in?(h[field])

          return problem("the function answered a result whose field #{field.inspect} contains a NUL character (U+0000), " \
                         "which workdo cannot store", call)
        end
        begin
          line = JSON.generate(h)
        rescue JSON::GeneratorError, EncodingError, TypeError, ArgumentError, SystemStackError => e
          return problem("the function's result cannot be written as JSON: #{e.class}: #{e.message}", call)
        end
        line = line.b
        if line.bytesize + 1 > MAX_RESULT_BYTES
          return problem("the function answered a result of #{line.bytesize + 1} bytes, over the limit of #{MAX_RESULT_BYTES}", call)
        end

        line
      end

      # An error result for an exception: its class, message and first backtrace lines in
      # message (within 4 KiB), the whole backtrace in text (within 64 KiB).
      def exception_outcome(err, retryable: true)
        said = begin
          err.message.to_s
        rescue StandardError
          "<the exception cannot be shown>"
        end
        said = "the function called exit(#{err.status})" if err.is_a?(SystemExit)
        head = Function.short(said.empty? ? err.class.name.to_s : "#{err.class}: #{utf8(said)}", MAX_MESSAGE_BYTES / 2)
        frames = own_frames(err.backtrace || [])
        shown = frames.first(MESSAGE_FRAMES)
        listed = ""
        unless shown.empty?
          of = shown.size < frames.size ? " (first #{shown.size} of #{frames.size})" : ""
          listed = "\nBacktrace#{of}:\n" + shown.map { |f| "  #{utf8(f)}" }.join("\n")
        end
        message = Function.short(head + listed, MAX_MESSAGE_BYTES)
        text = ["#{err.class}: #{utf8(said)}", *frames.map { |f| "\tfrom #{utf8(f)}" }].join("\n")
        Outcome.new("error", message: message, text: Function.short(text, MAX_TEXT_BYTES), retryable: retryable)
      end

      # s within limit UTF-8 bytes: its head and a note of how much was cut.
      def short(s, limit)
        s = utf8(s)
        return s if s.bytesize <= limit

        marker = " … [#{s.bytesize} bytes, cut]"
        keep = limit - marker.bytesize
        s.byteslice(0, keep).scrub("") + marker
      end

      # Where a failure answer comes from when nothing else can be said.
      def problem(message, call)
        h = { "status" => "error", "message" => Function.short(message, MAX_MESSAGE_BYTES), "retryable" => false }
        h["call"] = call unless call.nil?
        JSON.generate(h).b
      end

      private

      def utf8(s)
        s = s.to_s
        s = s.dup.force_encoding(Encoding::UTF_8) if s.encoding == Encoding::BINARY || s.encoding == Encoding::ASCII_8BIT
        s = s.encode(Encoding::UTF_8, invalid: :replace, undef: :replace) unless s.encoding == Encoding::UTF_8
        s.valid_encoding? ? s : s.scrub
      end

      # The function's frames: the backtrace up to the SDK's own call of it.
      def own_frames(backtrace)
        seen_own = false
        backtrace.take_while do |f|
          sdk = f.start_with?(SDK_DIR)
          seen_own ||= !sdk
          !(sdk && seen_own)
        end
      end

      def nul_in?(v)
        case v
        when String then v.include?("\0")
        when Hash then v.any? { |k, x| nul_in?(k.to_s) || nul_in?(x) }
        when Array then v.any? { |x| nul_in?(x) }
        else false
        end
      end
    end

    # A step function and how it may be run.
    class Handler
      attr_reader :thread_safe, :workers

      def self.wrap(fn, thread_safe: nil, workers: nil)
        raise ArgumentError, "a step function is a block or answers call(event)" unless fn.respond_to?(:call)

        if fn.is_a?(Handler)
          return fn if thread_safe.nil? && workers.nil?

          return Handler.new(fn.fn, thread_safe: thread_safe.nil? ? fn.thread_safe : thread_safe, workers: workers || fn.workers)
        end
        Handler.new(fn, thread_safe: thread_safe || false, workers: workers)
      end

      def initialize(fn, thread_safe: false, workers: nil)
        raise ArgumentError, "workers must be a positive Integer, not #{workers.inspect}" unless workers.nil? || (workers.is_a?(Integer) && workers >= 1)

        @fn = fn
        @thread_safe = thread_safe ? true : false
        @workers = workers
      end

      attr_reader :fn

      # Call the function directly (in tests): with an Event, or a Hash made into one.
      def call(event)
        @fn.call(event.is_a?(Event) ? event : Event.new(event))
      end

      # See Workdo::Function.answer.
      def answer(event)
        raw = event.is_a?(Event) ? event.raw : event
        call = raw.is_a?(Hash) && raw["call"].is_a?(String) ? raw["call"] : nil
        begin
          ev = event.is_a?(Event) ? event : Event.new(raw)
        rescue BadEvent => e
          return with_call({ "status" => "error", "message" => "the event is not valid for workdo/1: #{e.message}", "retryable" => false }, call)
        end
        Thread.current[:workdo_spans] = []
        result = begin
          @fn.call(ev)
        rescue Failure => e
          e.outcome
        rescue SignalException
          raise
        rescue Exception => e # rubocop:disable Lint/RescueException -- any error of the function is its step's error
          Function.exception_outcome(e)
        end
        h = as_hash(result)
        spans = Thread.current[:workdo_spans] || []
        Thread.current[:workdo_spans] = []
        h["spans"] = (h["spans"].is_a?(Array) ? h["spans"] : []) + spans unless spans.empty?
        with_call(h, ev.call)
      end

      private

      def with_call(h, call)
        h.delete("call")
        h["call"] = call unless call.nil?
        h
      end

      def as_hash(result)
        case result
        when nil then Results.completed.to_h
        when Outcome then result.to_h
        when Hash
          h = result.each_with_object({}) { |(k, v), out| out[k.to_s] = v }
          return h if h["status"].is_a?(String)

          { "status" => "error", "message" => Function.short("the function returned a Hash without a String \"status\": #{h.inspect}", 300), "retryable" => false }
        else
          { "status" => "error",
            "message" => "the function returned #{result.class}, not a result (completed, failed, defer, skipped, a Hash or nil)",
            "retryable" => false }
        end
      end
    end

    # The process side: stdin and stdout for the protocol, exec and warm mode.
    class Runner
      def initialize(handler)
        @handler = handler
        @lock = Mutex.new
      end

      # Serve and return the exit status.
      def serve
        take_stdio
        return serve_warm if ENV["WORKDO_MODE"] == "warm"

        serve_exec
        0
      end

      private

      # Keep the real stdin and stdout for the protocol; point fd 1 at stderr and fd 0 at
      # /dev/null for everything else (puts, subprocesses). Ruby's dups are close-on-exec, so no
      # subprocess inherits the protocol's streams.
      def take_stdio
        $stdout.flush
        @in = STDIN.dup
        @out = STDOUT.dup
        @in.binmode
        @out.binmode
        STDOUT.reopen(STDERR)
        STDIN.reopen(File::NULL)
        $stdout = $stderr
      end

      # Answers are written whole, one at a time, each flushed.
      def write(line)
        @lock.synchronize do
          @out.write(line, "\n")
          @out.flush
        rescue Errno::EPIPE, IOError, SystemCallError
          # The runtime is gone (it closed our stdout): nobody is left to answer.
          exit!(0)
        end
      end

      def reply(event)
        line = begin
          Function.encode(@handler.answer(event))
        rescue Exception => e # rubocop:disable Lint/RescueException -- the answer must go out whatever happens
          Function.problem("workdo-function could not answer: #{e.class}: #{e.message}", event["call"].is_a?(String) ? event["call"] : nil)
        end
        write(line)
      end

      def serve_exec
        data = @in.read.to_s.force_encoding(Encoding::UTF_8)
        line = begin
          event = JSON.parse(data)
          if event.is_a?(Hash)
            Function.encode(@handler.answer(event))
          else
            Function.problem("the event is a JSON #{event.class}, not an object", nil)
          end
        rescue JSON::ParserError, EncodingError, ArgumentError => e
          Function.problem("the event is not valid JSON for workdo/1: #{e.message}", nil)
        end
        write(line)
        @out.close
      end

      # Answer every event line, each answer carrying the event's call; with more than one
      # worker (a thread-safe function), up to that many at once, answering in the order they
      # finish.
      #
      # A line that is not a JSON object with a String call cannot be answered: an answer without
      # its call is a protocol error that gets the process killed anyway, and guessing a call
      # could answer another object's. So the process stops reading, answers the calls it has in
      # hand, says on stderr what it read (the runtime keeps stderr as the failed calls' text)
      # and exits with status 2; the runtime replaces it and retries the calls it had sent.
      def serve_warm
        n = @handler.thread_safe ? (@handler.workers || DEFAULT_WORKERS) : 1
        queue = Queue.new
        threads = n > 1 ? Array.new(n) { Thread.new { while (e = queue.pop) != :stop do reply(e) end } } : []
        status = 0
        while (line = @in.gets)
          next if line.strip.empty?

          why = nil
          begin
            event = JSON.parse(line.force_encoding(Encoding::UTF_8))
            if !event.is_a?(Hash)
              why = "it is a JSON #{event.class}, not an object"
            elsif !event["call"].is_a?(String)
              why = "it has no String \"call\" to answer"
            end
          rescue JSON::ParserError, EncodingError, ArgumentError => e
            why = "it is not JSON (#{Function.short(e.message, 300)})"
          end
          if why
            $stderr.write("workdo-function: cannot answer an input line (#{why}): #{Function.short(line.inspect, 500)}; " \
                          "finishing the calls in hand and exiting\n")
            status = EXIT_BAD_INPUT
            break
          end
          if threads.empty?
            reply(event)
          else
            queue << event
          end
        end
        threads.each { queue << :stop }
        threads.each(&:join)
        $stderr.flush
        status
      end
    end
  end
end
