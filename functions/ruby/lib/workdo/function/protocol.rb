# frozen_string_literal: true

require "time"

module Workdo
  module Function
    # The limits the runtime enforces on a result (runtime/src/invoke/mod.rs), in UTF-8 bytes.
    MAX_RESULT_BYTES = 1024 * 1024
    MAX_NOTE_BYTES = 64 * 1024
    MAX_MESSAGE_BYTES = 4 * 1024
    MAX_TEXT_BYTES = 64 * 1024
    # The furthest a function may defer its step: 10 years.
    MAX_DEFER_SECONDS = 10.0 * 365.0 * 86_400.0

    # An event that is not of the protocol's shape (a field of the wrong type).
    class BadEvent < StandardError; end

    # One step of one object's workflow to perform: what the runtime sends a function. Mirrors
    # functions/sdk/src/protocol.rs. Every field is a reader; the event as it came is #raw (fields
    # a newer runtime adds are there). Missing fields get empty defaults, so a test can build an
    # event from a few: Event.new("object" => "druid:bb123cd4567", "properties" => {...}).
    class Event
      attr_reader :raw, :protocol, :step_id, :workflow_id, :object, :template, :step, :version,
                  :lane, :attempt, :max_attempts, :properties, :documents, :context,
                  :traceparent, :deadline, :call, :fragment

      def initialize(raw)
        raise BadEvent, "an event is a JSON object, not #{raw.class}" unless raw.is_a?(Hash)

        @raw = raw
        @protocol = text("protocol", PROTOCOL)
        @step_id = int("step_id")
        @workflow_id = int("workflow_id")
        # The object worked on, e.g. druid:bb123cd4567.
        @object = text("object", "")
        @template = text("template", "")
        # The step's name.
        @step = text("step", "")
        @version = int("version")
        @lane = text("lane", "default")
        # This attempt's number, from 1.
        @attempt = int("attempt", 1)
        @max_attempts = int("max_attempts", 1)
        @properties = map("properties")
        # The object documents the step asked for (documents: in the template).
        @documents = map("documents")
        # The workflow's context.
        @context = map("context")
        @traceparent = text("traceparent", nil)
        # When the runtime stops waiting (RFC 3339).
        @deadline = text("deadline", "")
        # Warm functions: this call's id; the SDK copies it into the answer.
        @call = text("call", nil)
        # A generated step's matched node (dynamic dispatch), or nil.
        @fragment = text("fragment", nil)
      end

      # The object id without its druid: prefix (bb123cd4567).
      def bare_object
        object.sub(/\Adruid:/, "")
      end

      # Seconds until the deadline (negative once passed), or nil without a readable one.
      def seconds_left
        Time.iso8601(deadline) - Time.now
      rescue ArgumentError
        nil
      end

      def [](key)
        raw[key.to_s]
      end

      def inspect
        "#<Workdo::Function::Event object=#{object.inspect} step=#{step.inspect} attempt=#{attempt} call=#{call.inspect}>"
      end

      private

      def text(key, default)
        v = raw.fetch(key, nil)
        return default if v.nil?
        raise BadEvent, "the event's #{key.inspect} is #{v.class}, not a string" unless v.is_a?(String)

        v
      end

      def int(key, default = 0)
        v = raw.fetch(key, nil)
        return default if v.nil?
        raise BadEvent, "the event's #{key.inspect} is #{v.class}, not an integer" unless v.is_a?(Integer)

        v
      end

      def map(key)
        v = raw.fetch(key, nil)
        return {} if v.nil?
        raise BadEvent, "the event's #{key.inspect} is #{v.class}, not an object" unless v.is_a?(Hash)

        v
      end
    end

    # What a function answers. status is completed, skipped, error, defer or an intermediate
    # status the template declares for the step; the other fields apply as functions/README.md
    # says. Build one with the Results helpers (completed, failed, defer, skipped, intermediate).
    class Outcome
      FIELDS = %i[note lifecycle properties documents context start signal message text
                  retryable until seconds elapsed spans extra].freeze

      attr_accessor :status, *FIELDS

      def initialize(status, **fields)
        raise ArgumentError, "a result's status is a non-empty string, not #{status.inspect}" unless status.is_a?(String) && !status.empty?

        @status = status
        @properties = {}
        @documents = {}
        @start = []
        @spans = []
        @extra = {}
        fields.each do |k, v|
          raise ArgumentError, "a result has no field #{k.inspect}" unless FIELDS.include?(k)

          instance_variable_set("@#{k}", v)
        end
      end

      # The result as the protocol's JSON object (fields not set are left out; keys are strings).
      def to_h
        h = { "status" => status }
        h["note"] = note unless note.nil?
        h["lifecycle"] = lifecycle unless lifecycle.nil?
        obj = {}
        obj["properties"] = stringify(properties) unless properties.nil? || properties.empty?
        obj["documents"] = stringify(documents) unless documents.nil? || documents.empty?
        h["object"] = obj unless obj.empty?
        h["context"] = stringify(context) unless context.nil?
        h["start"] = start.map { |s| stringify(s) } unless start.nil? || start.empty?
        { "signal" => signal, "message" => message, "text" => text, "retryable" => retryable,
          "until" => self.until, "seconds" => seconds, "elapsed" => elapsed }.each do |k, v|
          h[k] = v unless v.nil?
        end
        h["spans"] = spans unless spans.nil? || spans.empty?
        h.merge!(stringify(extra)) unless extra.nil?
        h
      end

      def ==(other)
        other.is_a?(Outcome) && other.to_h == to_h
      end

      def inspect
        "#<Workdo::Function::Outcome #{to_h.inspect}>"
      end

      private

      def stringify(h)
        h.each_with_object({}) { |(k, v), out| out[k.to_s] = v }
      end
    end

    # Raise it to fail the step with this message (no backtrace):
    # raise Workdo::Function::Failure.new("no title", retry: false). Any other exception fails
    # the step too, with its backtrace.
    class Failure < StandardError
      attr_reader :text

      # retry: true (the default) or false; retryable: is the same.
      def initialize(message, text: nil, **opts)
        super(message)
        @retryable = Function.retry_option(opts)
        @text = text
      end

      def retryable?
        @retryable
      end

      def outcome
        Results.failed(message, retryable: @retryable, text: text)
      end
    end

    # retry: (a Ruby keyword, so read from the options) or retryable:, true unless given.
    def self.retry_option(opts)
      unknown = opts.keys - %i[retry retryable]
      raise ArgumentError, "unknown option #{unknown.first.inspect}" unless unknown.empty?

      v = opts.fetch(:retry) { opts.fetch(:retryable, true) }
      v ? true : false
    end

    # The result helpers. Call them as Workdo::Function.completed(...), or include
    # Workdo::Function::Results where the function is written and call completed(...).
    module Results
      module_function

      # The step is done. properties are merged into the object's (nil removes a key),
      # documents replace the object's, context is merged into the workflow's, start names
      # workflows to start on the object (a template name, or a Hash with "template" and
      # optional "context", "priority", "lane", "start_at").
      def completed(note: nil, properties: nil, documents: nil, context: nil, start: nil, lifecycle: nil, signal: nil)
        Outcome.new("completed", note: note, lifecycle: lifecycle, signal: signal,
                                 properties: (properties || {}).dup, documents: (documents || {}).dup,
                                 context: context&.dup, start: starts(start))
      end

      # The step failed (status error). With retry: true (the default) it is retried after a
      # back-off until the step's attempts are used; retry: false sends it straight to error.
      # (retry is a Ruby keyword, so it comes in opts; retryable: is the same.)
      def failed(message, text: nil, note: nil, **opts)
        Outcome.new("error", message: message.to_s, retryable: Function.retry_option(opts), text: text, note: note)
      end

      # The protocol's own name for failed.
      def error(message, text: nil, note: nil, **opts)
        failed(message, text: text, note: note, **opts)
      end

      # Not ready yet: try again in seconds: or at until: (a Time or an RFC 3339 string), without
      # using up an attempt.
      def defer(seconds: nil, note: nil, **opts)
        unknown = opts.keys - [:until]
        raise ArgumentError, "defer has no option #{unknown.first.inspect}" unless unknown.empty?

        at = opts[:until]
        raise ArgumentError, "defer takes seconds: or until:, one of them" if seconds.nil? == at.nil?

        o = Outcome.new("defer", note: note)
        if seconds.nil?
          o.until = at.respond_to?(:iso8601) ? at.iso8601(3) : at.to_s
        else
          s = Float(seconds)
          raise ArgumentError, "defer seconds must be from 0 to 10 years, not #{seconds.inspect}" unless s.finite? && s >= 0 && s <= MAX_DEFER_SECONDS

          o.seconds = s
        end
        o
      end

      # Nothing to do; counts as finished.
      def skipped(note: nil)
        Outcome.new("skipped", note: note)
      end

      # An intermediate status the template declares for the step (statuses: [IN PROCESS]).
      def intermediate(status, note: nil)
        Outcome.new(status, note: note)
      end

      def starts(start)
        return [] if start.nil?

        list = start.is_a?(Array) ? start : [start]
        list.map do |s|
          case s
          when String, Symbol then { "template" => s.to_s }
          when Hash
            t = s["template"] || s[:template]
            raise ArgumentError, "a workflow to start needs a template: #{s.inspect}" unless t.is_a?(String)

            s.each_with_object({}) { |(k, v), h| h[k.to_s] = v }
          else
            raise ArgumentError, "a workflow to start is a template name or a Hash, not #{s.inspect}"
          end
        end
      end
      private_class_method :starts
    end

    # Record the block as a span of this call: the runtime shows it in the step's trace.
    def self.span(name, **attributes)
      start = Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)
      yield
    ensure
      finish = Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)
      rec = { "name" => name.to_s, "start_unix_nano" => start, "end_unix_nano" => finish }
      rec["attributes"] = attributes.each_with_object({}) { |(k, v), h| h[k.to_s] = v.to_s } unless attributes.empty?
      (Thread.current[:workdo_spans] ||= []) << rec
    end
  end
end
